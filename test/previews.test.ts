/**
 * Port previews (issue 13 part 8) against real sandboxes under network `none`: servers started
 * in the sandbox (python3's http.server, a tiny node WebSocket echo server, misbehaving servers)
 * reached through the control plane with an API key, a signed URL and host-based routing; the
 * policy's `ports.allowed`, tenants, bad ports and paths, absent and failing servers, and the
 * preview log.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { AGENT_COMMAND } from '../contract/agent-runtime.js';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { leaseKeys } from '../contract/queue.js';
import { Sandbox, SbxError } from '../sdk/index.js';
import { ROUTES_UNDER_PREFIX } from '../control-plane/previews/fast-path.js';
import { REPO_ROOT, apiAs, docker, eventually, execIn, routesOf, runCli, useHarness } from './fixtures/index.js';

const DOMAIN = 'preview.test';
const DIAL_TIMEOUT_MS = 4000;
let policyDir = '';
const h = useHarness(async () => {
  policyDir = await mkdtemp(join(tmpdir(), 'sbx-previews-policies-'));
  const defaults = YAML.parse(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8')) as Record<string, unknown>;
  await writeFile(join(policyDir, 'default.yaml'), JSON.stringify(defaults));
  await writeFile(
    join(policyDir, 'preview-test.yaml'),
    JSON.stringify({ ...defaults, name: 'preview-test', version: 1, ports: { allowed: [8000, { from: 9000, to: 9010 }] } }),
  );
  // Short, so that the 504 test waits little; still ample for an agent that runs.
  return { SBX_POLICY_DIR: policyDir, SBX_PREVIEW_DOMAIN: DOMAIN, SBX_PREVIEW_DIAL_TIMEOUT_MS: String(DIAL_TIMEOUT_MS) };
});
afterAll(async () => {
  if (policyDir) await rm(policyDir, { recursive: true, force: true });
});
const api = apiAs(() => h.url);
const exec = execIn(() => h.client, { args: { timeoutMs: 30_000 } });

/** A tiny WebSocket echo server (RFC 6455: handshake, unmasking, echo of text/binary frames). */
const WS_ECHO = `
const http = require('http'), crypto = require('crypto');
const server = http.createServer((q, r) => r.end('plain answer\\n'));
server.on('upgrade', (req, sock) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + '\\r\\nX-Seen-Path: ' + req.url + '\\r\\n\\r\\n');
  let buf = Buffer.alloc(0);
  sock.on('error', () => {});
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15; let len = buf[1] & 127, off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      const masked = buf[1] & 128; const mask = masked ? buf.subarray(off, off + 4) : null; if (masked) off += 4;
      if (buf.length < off + len) return;
      const p = Buffer.from(buf.subarray(off, off + len)); if (mask) for (let i = 0; i < p.length; i++) p[i] ^= mask[i & 3];
      buf = buf.subarray(off + len);
      if (op === 8) { sock.end(); return; }
      const head = p.length < 126 ? Buffer.from([0x80 | op, p.length]) : Buffer.from([0x80 | op, 126, p.length >> 8, p.length & 255]);
      sock.write(Buffer.concat([head, p]));
    }
  });
});
server.listen(9001, '127.0.0.1');
`;

/** Servers that misbehave: 9002 cuts a response short, 9003 hangs up before answering. */
const BAD_SERVERS = `
const net = require('net');
net.createServer((s) => { s.on('error', () => {}); s.once('data', () => { s.write('HTTP/1.1 200 OK\\r\\nContent-Length: 100000\\r\\n\\r\\n' + 'x'.repeat(1000)); setTimeout(() => s.destroy(), 50); }); }).listen(9002, '127.0.0.1');
net.createServer((s) => { s.on('error', () => {}); s.once('data', () => s.destroy()); }).listen(9003, '127.0.0.1');
`;

/** An app that redirects and sets cookies as if it were served at `/` (9005). */
const ROOTED_APP = `
require('http').createServer((q, r) => {
  const u = q.url;
  if (u === '/old') { r.writeHead(302, { location: '/login?next=/old' }); return r.end(); }
  if (u === '/abs') { r.writeHead(301, { location: 'http://localhost:9005/next' }); return r.end(); }
  if (u === '/away') { r.writeHead(302, { location: 'https://example.invalid/x' }); return r.end(); }
  if (u === '/aware') { r.writeHead(302, { location: q.headers['x-forwarded-prefix'] + '/login' }); return r.end(); }
  if (u === '/cookie') { r.writeHead(200, { 'set-cookie': ['sid=1; Path=/; HttpOnly', 'pref=2; path=/app', 'bare=3'] }); return r.end('ok'); }
  if (u.startsWith('/slow/')) { setTimeout(() => r.end('slow'), Number(u.slice(6))); return; }
  if (u === '/echo') { let n = 0; q.on('data', (d) => (n += d.length)); q.on('end', () => r.end(JSON.stringify({ method: q.method, bytes: n, headers: q.headers }))); return; }
  r.end('page ' + u);
}).listen(9005, '127.0.0.1');
`;

const PAGE = `<!doctype html><title>sbx preview</title><p>hello from the sandbox ${randomBytes(4).toString('hex')}</p>\n`;

/** One masked client frame of `payload` (text). */
function wsFrame(payload: Buffer, opcode = 1): Buffer {
  const mask = randomBytes(4);
  const masked = Buffer.from(payload.map((b, i) => b ^ mask[i & 3]!));
  const head =
    payload.length < 126
      ? Buffer.from([0x80 | opcode, 0x80 | payload.length])
      : Buffer.from([0x80 | opcode, 0x80 | 126, payload.length >> 8, payload.length & 255]);
  return Buffer.concat([head, mask, masked]);
}

/** Reads one unmasked server frame's payload from `socket` (after `first` bytes already read). */
async function readFrame(socket: Duplex, first: Buffer): Promise<Buffer> {
  let buf = first;
  for (;;) {
    if (buf.length >= 2) {
      let len = buf[1]! & 127;
      let off = 2;
      if (len === 126 && buf.length >= 4) {
        len = buf.readUInt16BE(2);
        off = 4;
      }
      if (len !== 126 && buf.length >= off + len) return buf.subarray(off, off + len);
    }
    const [chunk] = (await once(socket, 'data')) as [Buffer];
    buf = Buffer.concat([buf, chunk]);
  }
}

/** Opens a WebSocket at `path` of the API (with `headers`), sends `message`, returns the echo and the 101's headers. */
async function wsEcho(
  path: string,
  headers: Record<string, string>,
  message: string,
): Promise<{ echo: string; headers: http.IncomingHttpHeaders }> {
  const url = new URL(h.url);
  const key = randomBytes(16).toString('base64');
  const req = http.request({
    host: url.hostname,
    port: url.port,
    path,
    headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': key, ...headers },
  });
  req.end();
  const [res, socket, head] = (await Promise.race([
    once(req, 'upgrade'),
    once(req, 'response').then((args) => {
      throw new Error(`no upgrade: HTTP ${(args[0] as http.IncomingMessage).statusCode}`);
    }),
  ])) as [http.IncomingMessage, Duplex, Buffer];
  try {
    expect(res.headers['sec-websocket-accept']).toBe(
      createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64'),
    );
    socket.write(wsFrame(Buffer.from(message)));
    const echo = (await readFrame(socket, head)).toString();
    socket.write(wsFrame(Buffer.alloc(0), 8));
    return { echo, headers: res.headers };
  } finally {
    socket.destroy();
  }
}

/** A raw GET (the path exactly as given, no URL normalisation) with `headers`. */
async function rawGet(
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const url = new URL(h.url);
  const req = http.request({ host: url.hostname, port: url.port, path, headers });
  req.end();
  const [res] = (await once(req, 'response')) as [http.IncomingMessage];
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() };
}

describe('port previews', () => {
  let leaseId: string;
  let base: string;
  const auth = (): Record<string, string> => ({ authorization: `Bearer ${h.apiKey}` });

  beforeAll(async () => {
    const lease = await h.client.createSandbox({ policy: 'preview-test' });
    leaseId = lease.id;
    base = `/v1/sandboxes/${leaseId}/ports`;
    expect(lease.manifest?.network.mode).toBe('none');
    const setup = await exec(leaseId, {
      cmd: [
        'mkdir -p /workspace/site',
        `printf '%s' "$PAGE" > /workspace/site/index.html`,
        'head -c 3000000 /dev/urandom > /workspace/site/big.bin',
        `cat > /workspace/ws.js <<'EOF'\n${WS_ECHO}\nEOF`,
        `cat > /workspace/bad.js <<'EOF'\n${BAD_SERVERS}\nEOF`,
        `cat > /workspace/rooted.js <<'EOF'\n${ROOTED_APP}\nEOF`,
        'sha256sum /workspace/site/big.bin',
      ].join('\n'),
      env: { PAGE },
    });
    expect(setup.status, JSON.stringify(setup)).toBe('succeeded');
    for (const cmd of [
      'cd /workspace/site && exec python3 -m http.server 8000 --bind 127.0.0.1',
      'exec node /workspace/ws.js',
      'exec node /workspace/bad.js',
      'exec node /workspace/rooted.js',
    ]) {
      const task = await h.client.submitCall(leaseId, 'exec', { cmd, background: true, timeoutMs: 3_600_000 }, { waitSeconds: 30 });
      expect(task.status).toBe('detached');
    }
    // The servers answer once they listen.
    await eventually(
      () => rawGet(`${base}/8000/`, auth()),
      (r) => r.status === 200,
    );
    await eventually(
      () => rawGet(`${base}/9001/`, auth()),
      (r) => r.status === 200,
    );
    await eventually(
      () => rawGet(`${base}/9005/`, auth()),
      (r) => r.status === 200,
    );
  });

  it("a dev server's page is fetched through the control plane with its exact body, in a sandbox with network none", async () => {
    const r = await rawGet(`${base}/8000/index.html?x=1`, auth());
    expect(r.status).toBe(200);
    expect(r.body).toBe(PAGE);
    expect(r.headers['server']).toMatch(/SimpleHTTP/);
    const big = await fetch(`${h.url}${base}/8000/big.bin`, { headers: auth() });
    const bytes = Buffer.from(await big.arrayBuffer());
    const inside = await exec(leaseId, 'sha256sum /workspace/site/big.bin | cut -d" " -f1');
    expect(bytes.length).toBe(3_000_000);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(inside.stdout.trim());
    // The preview root without its slash redirects to it.
    const bare = await rawGet(`${base}/8000`, auth());
    expect(bare.status).toBe(308);
    expect(bare.headers.location).toBe(`${base}/8000/`);
  });

  it('a WebSocket echo goes both ways through the preview', async () => {
    const { echo, headers } = await wsEcho(`${base}/9001/chat?room=1`, auth(), 'hello through the tunnel');
    expect(echo).toBe('hello through the tunnel');
    expect(headers['x-seen-path']).toBe('/chat?room=1');
    const long = 'y'.repeat(5000);
    expect((await wsEcho(`${base}/9001/`, auth(), long)).echo).toBe(long);
  });

  it('the API key never reaches the server in the sandbox; Host is localhost:<port>, the original forwarded', async () => {
    const r = await rawGet(`${base}/9001/`, { ...auth(), 'x-probe': '1' });
    expect(r.body).toBe('plain answer\n');
    // python's http.server logs the request line only; ask a server that echoes headers instead.
    const echoHeaders = await exec(leaseId, {
      cmd: `cat > /workspace/h.js <<'EOF'\nrequire('http').createServer((q, r) => r.end(JSON.stringify(q.headers))).listen(9004, '127.0.0.1');\nEOF\nexec node /workspace/h.js`,
      background: true,
    });
    expect(echoHeaders.status).toBe('detached');
    const seen = await eventually(
      () => rawGet(`${base}/9004/`, { ...auth(), cookie: 'a=1; sbx_preview_token=secret; b=2' }),
      (x) => x.status === 200,
    );
    const headers = JSON.parse(seen.body) as Record<string, string>;
    expect(headers.authorization).toBeUndefined();
    expect(headers.host).toBe('localhost:9004');
    expect(headers['x-forwarded-host']).toBe(new URL(h.url).host);
    expect(headers['x-forwarded-prefix']).toBe(`${base}/9004`);
    expect(headers.cookie).toBe('a=1; b=2');
  });

  it('a signed URL opens the page without an API key; tampered is 401 preview.url_invalid, expired 401 preview.url_expired', async () => {
    const minted = await api(h.apiKey, 'POST', `${base}/8000/url`, { expiresInSeconds: 600 });
    expect(minted.status, JSON.stringify(minted.body)).toBe(200);
    expect(minted.body.path).toMatch(new RegExp(`^/v1/previews/${leaseId}/8000\\.\\d+\\.bootstrap\\.[A-Za-z0-9_-]{22}/$`));
    const page = await rawGet(`${minted.body.path}index.html`);
    expect(page.status).toBe(200);
    expect(page.body).toBe(PAGE);
    const token = minted.body.path.split('/')[4] as string;
    const tampered = `${token.slice(0, -2)}${token.endsWith('AA') ? 'BB' : 'AA'}`;
    const bad = await rawGet(`/v1/previews/${leaseId}/${tampered}/index.html`);
    expect(bad.status).toBe(401);
    expect(JSON.parse(bad.body).error.code).toBe('preview.url_invalid');
    const short = await api(h.apiKey, 'POST', `${base}/8000/url`, { expiresInSeconds: 1 });
    expect(short.status).toBe(200);
    const expired = await eventually(
      () => rawGet(`${short.body.path}index.html`),
      (r) => r.status !== 200,
    );
    expect(expired.status).toBe(401);
    expect(JSON.parse(expired.body).error.code).toBe('preview.url_expired');
  });

  it('host-based routing: <port>-<id>.<domain> moves the token into a host cookie, then serves the page and WebSockets', async () => {
    const minted = await api(h.apiKey, 'POST', `${base}/9001/url`, { expiresInSeconds: 600 });
    expect(minted.body.hostUrl).toContain(`://9001-${leaseId}.${DOMAIN}/?sbx_preview_token=`);
    const hostUrl = new URL(minted.body.hostUrl as string);
    const host = `9001-${leaseId}.${DOMAIN}`;
    const first = await rawGet(`${hostUrl.pathname}${hostUrl.search}`, { host });
    expect(first.status).toBe(302);
    expect(first.headers.location).toBe('/');
    const cookie = (first.headers['set-cookie'] ?? [])[0]!.split(';')[0]!;
    expect(cookie).toMatch(/^sbx_preview_token=/);
    const page = await rawGet('/', { host, cookie });
    expect(page.status).toBe(200);
    expect(page.body).toBe('plain answer\n');
    expect((await wsEcho('/socket', { host, cookie }, 'via host')).echo).toBe('via host');
    // Without the cookie, or for another port, the host refuses.
    expect((await rawGet('/', { host })).status).toBe(401);
    const other = await rawGet('/', { host: `9002-${leaseId}.${DOMAIN}`, cookie });
    expect(other.status).toBe(401);
    expect(JSON.parse(other.body).error.code).toBe('preview.url_invalid');
  });

  it('a port the policy does not allow is 403 preview.port_denied, also for minting a URL', async () => {
    for (const [method, path] of [
      ['GET', `${base}/8001/`],
      ['POST', `${base}/8001/url`],
      ['GET', `${base}/22/`],
    ] as const) {
      const r = await api(h.apiKey, method, path, method === 'POST' ? {} : undefined);
      expect(r.status, path).toBe(403);
      expect(r.body.error.code).toBe('preview.port_denied');
    }
    const plain = await h.client.createSandbox();
    try {
      const r = await api(h.apiKey, 'GET', `/v1/sandboxes/${plain.id}/ports/8000/`);
      expect(r.status).toBe(403);
      expect(r.body.error.details.allowed).toEqual([]);
    } finally {
      await h.client.releaseSandbox(plain.id);
    }
  });

  it("another tenant's sandbox is 404 lease.not_found", async () => {
    const key = await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'previews-other', role: 'user', tenant: 'previews-other' });
    expect(key.status).toBe(201);
    for (const [method, path] of [
      ['GET', `${base}/8000/index.html`],
      ['POST', `${base}/8000/url`],
      ['GET', `/v1/sandboxes/${leaseId}/previews`],
    ] as const) {
      const r = await api(key.body.secret, method, path, method === 'POST' ? {} : undefined);
      expect(r.status, path).toBe(404);
      expect(r.body.error.code).toBe('lease.not_found');
    }
  });

  it('the fast path (previews/fast-path.ts) and fastify answer alike: what it does not take, fastify answers with the documented error', async () => {
    // Every other route under the preview prefixes is one the fast path leaves to the router.
    const others = (prefix: string): Set<string> =>
      new Set(
        routesOf(h.plane.app)
          .filter((r) => r.path.startsWith(prefix) && r.path !== `${prefix}*`)
          .map((r) => `${r.method} ${r.path.slice(prefix.length)}`),
      );
    expect(others('/v1/sandboxes/:id/ports/:port/')).toEqual(ROUTES_UNDER_PREFIX);
    expect(others('/v1/previews/:id/:token/')).toEqual(new Set());
    // A percent-escaped port is not the plain form: fastify routes it (and decodes it) to the same page.
    const escaped = await rawGet(`${base}/%38000/index.html`, auth());
    const plain = await rawGet(`${base}/8000/index.html`, auth());
    expect([escaped.status, escaped.body]).toEqual([200, PAGE]);
    expect([plain.status, plain.body]).toEqual([200, PAGE]);
    // Refusals come from fastify's checks, in the documented shape.
    for (const [headers, status, code] of [
      [{}, 401, 'auth.missing_api_key'],
      [{ authorization: 'Bearer not-a-key' }, 401, 'auth.invalid_api_key'],
    ] as const) {
      const r = await rawGet(`${base}/8000/index.html`, headers);
      expect(r.status).toBe(status);
      expect(JSON.parse(r.body).error.code).toBe(code);
    }
    const missing = await rawGet(`/v1/sandboxes/sbx_00000000000000000000/ports/8000/`, auth());
    expect([missing.status, JSON.parse(missing.body).error.code]).toEqual([404, 'lease.not_found']);
    // Once taken, a failure to reach the server is answered in the documented shape as well.
    const closed = await rawGet(`${base}/9009/`, auth());
    expect([closed.status, JSON.parse(closed.body).error.code]).toEqual([502, 'preview.port_closed']);
  });

  it('request bodies ride the early data of pooled connections: 4 MB posted arrive whole, chunked or with a length, also with a server that refuses', async () => {
    const body = randomBytes(4 * 1024 * 1024);
    // Warm: the pool exists (early data rides pooled connections only).
    expect((await rawGet(`${base}/9005/`, auth())).status).toBe(200);
    for (const headers of [{ 'content-length': String(body.length) }, { 'transfer-encoding': 'chunked' }]) {
      const url = new URL(h.url);
      const req = http.request({
        host: url.hostname,
        port: url.port,
        path: `${base}/9005/echo`,
        method: 'POST',
        headers: { ...auth(), ...headers },
      });
      for (let at = 0; at < body.length; at += 256 * 1024) req.write(body.subarray(at, at + 256 * 1024));
      req.end();
      const [res] = (await once(req, 'response')) as [http.IncomingMessage];
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      expect(res.statusCode).toBe(200);
      expect(JSON.parse(Buffer.concat(chunks).toString())).toMatchObject({ method: 'POST', bytes: body.length });
    }
    // Nothing listens: the early bytes are dropped with the connection, the answer is the
    // tunnel's, and the agent keeps no connection open for it (its open descriptors come back).
    const container = `sbx-${leaseId}`;
    const agentPid = (await docker('exec', container, 'pgrep', '-f', `^${AGENT_COMMAND.join(' ')}$`)).trim();
    const agentFds = async (): Promise<number> => (await docker('exec', container, 'ls', `/proc/${agentPid}/fd`)).trim().split('\n').length;
    const fdsBefore = await agentFds();
    for (let i = 0; i < 20; i += 1) {
      const refused = await fetch(`${h.url}${base}/9008/upload`, { method: 'POST', headers: auth(), body: body.subarray(0, 64 * 1024) });
      expect(refused.status).toBe(502);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('preview.port_closed');
    }
    await eventually(agentFds, (n) => n <= fdsBefore + 2);
  });

  it('port 0 and 65536 are 400 input.invalid', async () => {
    for (const port of ['0', '65536', 'abc', '-1']) {
      const r = await api(h.apiKey, 'GET', `${base}/${port}/`);
      expect(r.status, port).toBe(400);
      expect(r.body.error.code).toBe('input.invalid');
    }
  });

  it('paths with dot segments are 400 preview.invalid_path; encoded slashes reach the server as sent', async () => {
    for (const path of ['/..', '/a/../b', '/%2e%2e/etc/passwd', '/a%2F..%2Fb', '/a%5C..%5Cb']) {
      const r = await rawGet(`${base}/8000${path}`, auth());
      expect(r.status, path).toBe(400);
      expect(JSON.parse(r.body).error.code).toBe('preview.invalid_path');
    }
    // http.server decodes %2F and finds no such file: its own 404, not the control plane's.
    const slash = await rawGet(`${base}/8000/site%2Findex.html`, auth());
    expect(slash.status).toBe(404);
    expect(slash.headers['server']).toMatch(/SimpleHTTP/);
  });

  it('no server on the port is 502 preview.port_closed; a server that hangs up is 502 preview.upstream_failed; one that cuts a response short aborts it; the control plane answers after', async () => {
    const closed = await api(h.apiKey, 'GET', `${base}/9010/`);
    expect(closed.status).toBe(502);
    expect(closed.body.error.code).toBe('preview.port_closed');
    const hangup = await api(h.apiKey, 'GET', `${base}/9003/`);
    expect(hangup.status).toBe(502);
    expect(hangup.body.error.code).toBe('preview.upstream_failed');
    const cut = await fetch(`${h.url}${base}/9002/`, { headers: auth() });
    expect(cut.status).toBe(200);
    await expect(cut.arrayBuffer()).rejects.toThrow();
    expect((await api(h.apiKey, 'GET', '/healthz')).status).toBe(200);
    expect((await rawGet(`${base}/8000/index.html`, auth())).body).toBe(PAGE);
  });

  it('redirects and cookie paths of an app served at / stay under the path prefix; on a preview host they pass unchanged', async () => {
    const prefix = `${base}/9005`;
    const old = await rawGet(`${prefix}/old`, auth());
    expect(old.status).toBe(302);
    expect(old.headers.location).toBe(`${prefix}/login?next=/old`);
    // Followed as a browser would, the redirect lands on the app's page, not outside the preview.
    const followed = await fetch(`${h.url}${prefix}/old`, { headers: auth() });
    expect(followed.url).toBe(`${h.url}${prefix}/login?next=/old`);
    expect(await followed.text()).toBe('page /login?next=/old');
    expect((await rawGet(`${prefix}/abs`, auth())).headers.location).toBe(`${prefix}/next`);
    expect((await rawGet(`${prefix}/away`, auth())).headers.location).toBe('https://example.invalid/x');
    // An app that already honours X-Forwarded-Prefix is not prefixed twice.
    expect((await rawGet(`${prefix}/aware`, auth())).headers.location).toBe(`${prefix}/login`);
    const cookie = await rawGet(`${prefix}/cookie`, auth());
    expect(cookie.headers['set-cookie']).toEqual([`sid=1; Path=${prefix}/; HttpOnly`, `pref=2; path=${prefix}/app`, 'bare=3']);
    // A signed URL's prefix is the signed path.
    const minted = await api(h.apiKey, 'POST', `${prefix}/url`, { expiresInSeconds: 600 });
    const signed = minted.body.path.replace(/\/$/, '') as string;
    expect((await rawGet(`${signed}/old`)).headers.location).toBe(`${signed}/login?next=/old`);
    // On a preview host the app is at / and nothing is rewritten.
    const hostUrl = new URL(minted.body.hostUrl as string);
    const host = `9005-${leaseId}.${DOMAIN}`;
    const first = await rawGet(`${hostUrl.pathname}${hostUrl.search}`, { host });
    const hostCookie = (first.headers['set-cookie'] ?? [])[0]!.split(';')[0]!;
    expect((await rawGet('/old', { host, cookie: hostCookie })).headers.location).toBe('/login?next=/old');
    expect((await rawGet('/cookie', { host, cookie: hostCookie })).headers['set-cookie']![0]).toBe('sid=1; Path=/; HttpOnly');
  });

  it('a server slower to answer than the dial timeout still answers through a pooled connection: the agent says the port answered without waiting for the server', async () => {
    // The pool is warm: this request rides early data, where the agent's line may travel with the server's first bytes.
    expect((await rawGet(`${base}/9005/warm`, auth())).body).toBe('page /warm');
    const slow = await rawGet(`${base}/9005/slow/${DIAL_TIMEOUT_MS + 500}`, auth());
    expect(slow.status).toBe(200);
    expect(slow.body).toBe('slow');
  }, 30_000);

  it('after the first request, preview connections come from the agent’s pool: no control message per request', async () => {
    await rawGet(`${base}/8000/index.html`, auth());
    const subscriber = h.redis.duplicate();
    const messages: string[] = [];
    try {
      subscriber.on('message', (_channel: string, message: string) => messages.push(message));
      await subscriber.subscribe(leaseKeys(h.config.redisPrefix, leaseId).control);
      for (let i = 0; i < 10; i += 1) expect((await rawGet(`${base}/8000/index.html`, auth())).body).toBe(PAGE);
      // Ten at once: more than the pool holds, so some are signalled, and all are answered.
      const burst = await Promise.all(Array.from({ length: 10 }, () => rawGet(`${base}/8000/index.html`, auth())));
      expect(burst.map((r) => r.body)).toEqual(Array(10).fill(PAGE));
    } finally {
      subscriber.disconnect();
    }
    expect(messages.filter((m) => m.includes('"preview_open"')).length).toBeLessThan(10);
  });

  it('sbx preview prints a signed URL that opens the page and sbx previews lists the log; a denied port fails with its code', async () => {
    const target = { url: h.url, apiKey: h.apiKey };
    const printed = await runCli(target, ['preview', leaseId, '8000', '--expires', '600']);
    expect(printed.code, printed.stderr).toBe(0);
    const url = printed.stdout.trim();
    expect(url).toMatch(new RegExp(`^http://.*/v1/previews/${leaseId}/8000\\.|^http://8000-${leaseId}\\.${DOMAIN.replace('.', '\\.')}/`));
    const json = await runCli(target, ['--json', 'preview', leaseId, '8000']);
    expect(json.code, json.stderr).toBe(0);
    const minted = JSON.parse(json.stdout) as { path: string; port: number; expiresAt: string };
    expect(minted.port).toBe(8000);
    expect((await rawGet(`${minted.path}index.html`)).body).toBe(PAGE);
    const denied = await runCli(target, ['preview', leaseId, '8001']);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toContain('preview.port_denied');
    const bad = await runCli(target, ['preview', leaseId, '65536']);
    expect(bad.code).not.toBe(0);
    const log = await runCli(target, ['previews', leaseId]);
    expect(log.code, log.stderr).toBe(0);
    expect(log.stdout).toMatch(/ api {2}bootstrap {2}http GET :8000\/index\.html {2}200 {2}completed {2}↑\d+ ↓\d+ B {2}\d+ ms/);
    const logJson = JSON.parse((await runCli(target, ['--json', 'previews', leaseId])).stdout) as { events: unknown[]; dropped: number };
    expect(logJson.events.length).toBeGreaterThan(0);
    // A server started from the CLI as a background task outlives the command that started it.
    const started = await runCli(target, [
      'exec',
      leaseId,
      '--background',
      '--',
      'cd /workspace/site && exec python3 -m http.server 9006 --bind 127.0.0.1',
    ]);
    expect(started.code, started.stderr).toBe(0);
    expect(started.stdout).toMatch(/^call_[0-9a-f]+ pid \d+\n$/);
    const page = await eventually(
      () => rawGet(`${base}/9006/index.html`, auth()),
      (r) => r.status === 200,
    );
    expect(page.body).toBe(PAGE);
  });

  it('the SDK: sandbox.ports.url opens the page, .fetch reaches the server, .log lists it; errors are SbxError with their codes', async () => {
    const sandbox = await Sandbox.connect(leaseId, { url: h.url, apiKey: h.apiKey });
    const signed = await sandbox.ports.url(8000, { expiresInSeconds: 120 });
    expect(signed.port).toBe(8000);
    expect(Date.parse(signed.expiresAt) - Date.now()).toBeLessThanOrEqual(120_000);
    expect((await rawGet(`${signed.path}index.html`)).body).toBe(PAGE);
    const answer = await sandbox.ports.fetch(8000, 'index.html?sdk=1');
    expect(answer.status).toBe(200);
    expect(await answer.text()).toBe(PAGE);
    const posted = await sandbox.ports.fetch(9005, '/echo', { method: 'POST', body: 'xyz', headers: { 'x-sdk': 'yes' } });
    expect(await posted.json()).toMatchObject({ method: 'POST', bytes: 3, headers: { 'x-sdk': 'yes' } });
    const closed = await sandbox.ports.fetch(9010, '/');
    expect(closed.status).toBe(502);
    expect(((await closed.json()) as { error: { code: string } }).error.code).toBe('preview.port_closed');
    const denied = await sandbox.ports.url(8001).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(SbxError);
    expect((denied as SbxError).code).toBe('preview.port_denied');
    const log = await sandbox.ports.log({ limit: 5 });
    expect(log.events.length).toBeLessThanOrEqual(5);
    expect(log.events.some((e) => e.path === '/index.html' && e.status === 200)).toBe(true);
  });

  it('an agent that brings no connection in time (stopped with SIGSTOP) is 504 preview.agent_unreachable, on a pooled connection and on a signalled one', async () => {
    const frozen = await h.client.createSandbox({ policy: 'preview-test' });
    const container = `sbx-${frozen.id}`;
    let agentPid = '';
    try {
      const task = await h.client.submitCall(
        frozen.id,
        'exec',
        { cmd: 'cd /tmp && exec python3 -m http.server 8000 --bind 127.0.0.1', background: true, timeoutMs: 600_000 },
        { waitSeconds: 30 },
      );
      expect(task.status).toBe('detached');
      const path = `/v1/sandboxes/${frozen.id}/ports/8000/`;
      await eventually(
        () => api(h.apiKey, 'GET', path),
        (r) => r.status === 200,
      );
      const unreachable = async (): Promise<number> =>
        (await api(h.apiKey, 'GET', `/v1/sandboxes/${frozen.id}/previews`)).body.events.filter(
          (e: { outcome: string }) => e.outcome === 'agent_unreachable',
        ).length;
      // Under heavy load a first connection may already have come too late; only the ones below count.
      const before = await unreachable();
      // The agent alone stops (the container stays running, so the lease is still active).
      agentPid = (await docker('exec', container, 'pgrep', '-f', `^${AGENT_COMMAND.join(' ')}$`)).trim();
      expect(agentPid).toMatch(/^\d+$/);
      await docker('exec', container, 'kill', '-STOP', agentPid);
      // 5 opens: the pool's idle connections (handed the port, never answered), then a control message.
      for (let i = 0; i < 5; i += 1) {
        const started = Date.now();
        const r = await api(h.apiKey, 'GET', path);
        expect(r.status, `open ${i}`).toBe(504);
        expect(r.body.error.code).toBe('preview.agent_unreachable');
        expect(r.body.error.details.timeoutMs).toBe(DIAL_TIMEOUT_MS);
        expect(Date.now() - started).toBeGreaterThanOrEqual(DIAL_TIMEOUT_MS - 50);
      }
      await docker('exec', container, 'kill', '-CONT', agentPid);
      agentPid = '';
      // Running again, the agent serves previews again.
      expect((await api(h.apiKey, 'GET', path)).status).toBe(200);
      expect((await unreachable()) - before).toBe(5);
    } finally {
      if (agentPid) await docker('exec', container, 'kill', '-CONT', agentPid).catch(() => undefined);
      await h.client.releaseSandbox(frozen.id);
    }
  }, 180_000);

  it('every preview connection is in the preview log: who, port, how, bytes each way, duration, outcome', async () => {
    const log = await eventually(
      () => api(h.apiKey, 'GET', `/v1/sandboxes/${leaseId}/previews`),
      (r) => (r.body?.events ?? []).some((e: { outcome: string }) => e.outcome === 'aborted'),
    );
    const events = log.body.events as Array<Record<string, any>>;
    const big = events.find((e) => e.path === '/big.bin')!;
    expect(big).toMatchObject({
      port: 8000,
      via: 'api',
      keyId: 'bootstrap',
      tenant: 'default',
      kind: 'http',
      method: 'GET',
      status: 200,
      outcome: 'completed',
    });
    expect(big.bytesFromSandbox).toBeGreaterThan(3_000_000);
    expect(big.bytesToSandbox).toBeGreaterThan(0);
    expect(big.durationMs).toBeGreaterThanOrEqual(0);
    const ws = events.find((e) => e.kind === 'websocket' && e.path === '/chat')!;
    expect(ws).toMatchObject({ port: 9001, status: 101, via: 'api' });
    expect(ws.bytesFromSandbox).toBeGreaterThan('hello through the tunnel'.length);
    expect(events.some((e) => e.via === 'url' && e.status === 200)).toBe(true);
    expect(events.some((e) => e.via === 'host' && e.kind === 'websocket')).toBe(true);
    const outcomes = new Set(events.map((e) => e.outcome));
    for (const o of ['denied', 'invalid_path', 'port_closed', 'upstream_failed', 'aborted']) expect(outcomes, o).toContain(o);
    expect(log.body.dropped).toBe(0);
  });
});
