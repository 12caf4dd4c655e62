/**
 * Malformed JSON on every route (property-based, fast-check): every route read from fastify's
 * route tree gets mutated JSON bodies — truncated, invalid UTF-8, nested 100k deep, huge
 * numbers, `__proto__` / `constructor` keys, wrong types, duplicate keys, NUL bytes, very long
 * strings — whole or cut short (the client ends the stream mid-body), with an admin key and a
 * user key, on a real leased sandbox and a nonexistent one.
 * Every answer is a 2xx or 4xx, and every error is in the documented shape with a catalogue
 * code; nothing is a 500 or hangs; the process stays up with bounded memory. What a mutation
 * happened to create (a lease, a key, a secret, a policy) is removed at once.
 */
import { randomBytes } from 'node:crypto';
import { Agent, request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ERROR_CODES, ErrorBody } from '../contract/errors.js';
import { CONNECT_HTTP_STATUS } from '../control-plane/e2b/connect.js';
import { routesOf, startHarness, type Harness, rawExchange, rawRequest } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
let callId: string;
let receiptId: string;
let userKey: string;
const agent = new Agent({ keepAlive: true, maxSockets: 4 });
const tag = randomBytes(3).toString('hex');
/** Each request must be answered within this: longer is a hang. */
const ANSWER_TIMEOUT_MS = 20_000;

interface Answer {
  status: number;
  contentType: string;
  /** A redirect's target (the docs UI redirects to its index). */
  location: string | undefined;
  body: string;
}

function send(method: string, path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, h.url);
    const req = httpRequest(
      url,
      { method, agent, headers: { ...headers, 'content-length': String(body.length) }, timeout: ANSWER_TIMEOUT_MS },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: String(res.headers['content-type'] ?? ''),
            location: res.headers.location,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${ANSWER_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** A body each route would take, the start of each mutation. */
function templateOf(method: string, path: string): Record<string, unknown> {
  if (path === '/v1/sandboxes') return { ttlSeconds: 60, labels: { fuzz: tag } };
  if (path.endsWith('/calls')) return { tool: 'exec', args: { argv: ['true'] } };
  if (path.endsWith('/renew')) return { ttlSeconds: 600 };
  if (path.startsWith('/v1/secrets/')) return { value: 'v' };
  if (path.endsWith('/quota')) return { maxSandboxes: 5 };
  if (path === '/v1/api-keys') return { name: 'fuzz', role: 'user', tenant: 'fuzz' };
  if (path.startsWith('/v1/policies/') && method === 'PUT') return { version: 1, network: { mode: 'none' } };
  return { a: 'b', n: 1 };
}

const deep = 100_000;
/** The template's JSON with the value of its first key (or `key`) replaced by raw JSON text. */
function withRaw(t: Record<string, unknown>, raw: string, key = Object.keys(t)[0]!): Buffer {
  return Buffer.from(JSON.stringify({ ...t, [key]: '\u0001raw' }).replace('"\\u0001raw"', raw));
}
/** The mutations: each turns a template into a hostile body. */
const MUTATIONS: Record<string, (t: Record<string, unknown>, n: number) => Buffer> = {
  truncated: (t, n) => {
    const text = JSON.stringify(t);
    return Buffer.from(text.slice(0, n % text.length));
  },
  invalidUtf8: (t, n) => {
    const text = Buffer.from(JSON.stringify(t));
    const at = 1 + (n % (text.length - 1));
    return Buffer.concat([text.subarray(0, at), Buffer.from([0xff, 0xc3, 0x28, 0xe2, 0x82]), text.subarray(at)]);
  },
  openBrackets: () => Buffer.from('['.repeat(deep)),
  deepNesting: (t) => withRaw(t, `${'['.repeat(deep)}${']'.repeat(deep)}`),
  deepObjects: (t) => withRaw(t, `${'{"a":'.repeat(deep)}1${'}'.repeat(deep)}`, 'args'),
  hugeNumbers: (t, n) => withRaw(t, ['1e999', '-1e999', '123456789012345678901234567890', '0.1e-400', '-0', '1.5'][n % 6]!),
  protoKeys: (t, n) =>
    Buffer.from(
      [`{"__proto__":{"admin":true},`, `{"constructor":{"prototype":{"admin":true}},`, `{"args":{"__proto__":{"x":1}},`][n % 3] +
        JSON.stringify(t).slice(1),
    ),
  wrongTopType: (_t, n) => Buffer.from(['[]', 'null', '1', '"s"', 'true', '[{"tool":"exec"}]'][n % 6]!),
  wrongFieldType: (t, n) => {
    const key = Object.keys(t)[n % Object.keys(t).length]!;
    return Buffer.from(JSON.stringify({ ...t, [key]: [[], {}, null, true, -1, 'x', [1, 'a'], { x: { y: [] } }][n % 8] }));
  },
  duplicateKeys: (t) => {
    const [key, value] = Object.entries(t)[0]!;
    return Buffer.from(`{${JSON.stringify(key)}:${JSON.stringify(typeof value === 'number' ? 'x' : 1)},${JSON.stringify(t).slice(1)}`);
  },
  nulBytes: (t, n) =>
    n % 2 === 0
      ? Buffer.from(JSON.stringify(t).replace(/"([^"]*)"(?=[,}])/, '"\\u0000$1\\u0000"'))
      : Buffer.concat([Buffer.from(JSON.stringify(t)), Buffer.from([0])]),
  longStrings: (t, n) => {
    const long = 'a'.repeat(n % 2 === 0 ? 900_000 : 100_000);
    return Buffer.from(n % 4 < 2 ? JSON.stringify({ ...t, [Object.keys(t)[0]!]: long }) : JSON.stringify({ [long]: 1, ...t }));
  },
  emptyBody: () => Buffer.alloc(0),
};

type Target = { method: string; path: string };
let targets: Target[];

/** The concrete path for a route: its params filled with real or made-up ids. */
function concrete(path: string, real: boolean): string {
  return path
    .replace(':id', real ? leaseId : `sbx_${'0'.repeat(26)}`)
    .replace(':callId', real ? callId : 'nocall')
    .replace(':receiptId', real ? receiptId : 'noreceipt')
    .replace(':artifactId', 'noartifact')
    .replace(':name', `fuzz-${tag}`)
    .replace(':version', real ? '1' : 'x')
    .replace(':tenant', 'fuzz')
    .replace(':pid', '1')
    .replace('*', 'x');
}

/** Removes what a mutation that was accepted created, so that no run leaves state behind. */
async function undo(method: string, path: string, answer: Answer): Promise<void> {
  if (answer.status >= 300 || method === 'GET') return;
  const admin = { authorization: `Bearer ${h.apiKey}` };
  const created = (): Record<string, unknown> => JSON.parse(answer.body) as Record<string, unknown>;
  if (method === 'POST' && path === '/v1/sandboxes') await send('DELETE', `/v1/sandboxes/${String(created().id)}`, admin, Buffer.alloc(0));
  if (method === 'POST' && path === '/v1/api-keys') await send('DELETE', `/v1/api-keys/${String(created().id)}`, admin, Buffer.alloc(0));
  if (method === 'PUT' && path.startsWith('/v1/secrets/')) await send('DELETE', path, admin, Buffer.alloc(0));
  if (method === 'PUT' && path.startsWith('/v1/policies/')) await send('DELETE', path, admin, Buffer.alloc(0));
  // A paused sandbox answers its calls and files 409 lease.paused: resumed at once, so the next probes reach it.
  if (method === 'POST' && path === '/v1/sandboxes/:id/pause')
    await send('POST', `/v1/sandboxes/${leaseId}/resume`, admin, Buffer.alloc(0));
}

let requests = 0;
const statuses = new Map<number, number>();

/**
 * Sends the body cut short over a raw socket: Content-Length promises 64 bytes more than are
 * sent, then the client ends its side, so the server meets the end of the stream mid-body.
 */
async function sendCut(method: string, path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
  const r = await rawExchange(
    Number(new URL(h.url).port),
    rawRequest(method, path, { ...headers, 'content-length': body.length + 64 }, body),
    'half',
    ANSWER_TIMEOUT_MS,
  );
  if (!r) throw new Error(`${method} ${path}: a body cut short got no answer`);
  return { status: r.status, contentType: r.headers['content-type'] ?? '', location: r.headers.location, body: r.body };
}

/**
 * Whether `text` is an error body in the documented shape of `path`: sbx's `{error: {code, …}}`
 * with a catalogued code; on the E2B-compatible API (docs/e2b.md), E2B's shapes — a Connect
 * error on envd's RPCs, `{code: <status>, message}` elsewhere — or, for a body cut short
 * (`cut`), sbx's, answered by the server's edge before any route.
 */
function documentedError(path: string, status: number, text: string, cut: boolean): boolean {
  const body = JSON.parse(text) as unknown;
  const sbx = ErrorBody.safeParse(body);
  const catalogued = sbx.success && Object.keys(ERROR_CODES).includes(sbx.data.error.code);
  if (!path.startsWith('/e2b/')) return catalogued;
  const rpc = path.startsWith('/e2b/envd/') && !/^\/e2b\/envd\/(files|health)(\?|$)/.test(path);
  const shape = rpc
    ? z.object({ code: z.enum(Object.keys(CONNECT_HTTP_STATUS) as [string, ...string[]]), message: z.string() })
    : z.object({ code: z.literal(status), message: z.string() });
  return shape.safeParse(body).success || (cut && catalogued);
}

/** Sends one mutated request (`cut`: its body cut short) and checks the answer. */
async function probe(
  target: Target,
  asUser: boolean,
  realId: boolean,
  mutation: string,
  n: number,
  contentType: string,
  cut = false,
): Promise<void> {
  // Releasing the shared sandbox would end every later case on it: its DELETE gets the made-up id only.
  const real = realId && !(target.method === 'DELETE' && target.path === '/v1/sandboxes/:id');
  const path = concrete(target.path, real);
  const body = MUTATIONS[mutation]!(templateOf(target.method, target.path), n);
  const headers = { authorization: `Bearer ${asUser ? userKey : h.apiKey}`, 'content-type': contentType };
  const answer = await (cut ? sendCut : send)(target.method, path, headers, body);
  requests += 1;
  statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
  const what = `${target.method} ${path} (${mutation}/${n}${cut ? ' cut short' : ''}, ${contentType}, ${asUser ? 'user' : 'admin'} key) → ${answer.status} ${answer.body.slice(0, 300)}`;
  const redirect = answer.status >= 300 && answer.status < 400 && answer.location !== undefined;
  expect((answer.status >= 200 && answer.status < 300) || (answer.status >= 400 && answer.status < 500) || redirect, what).toBe(true);
  if (answer.status >= 400) {
    expect(answer.contentType, what).toMatch(/^application\/json/);
    expect(documentedError(path, answer.status, answer.body, cut), what).toBe(true);
  }
  await undo(target.method, target.path, answer);
}

beforeAll(async () => {
  h = await startHarness();
  leaseId = (await h.client.createSandbox()).id;
  const call = await h.client.submitCall(leaseId, 'exec', { argv: ['true'] }, { waitSeconds: 60 });
  callId = call.callId;
  receiptId = String((call as { receipt?: { receiptId?: string } }).receipt?.receiptId ?? 'noreceipt');
  const key = await h.client.raw('POST', '/v1/api-keys', {
    body: JSON.stringify({ name: 'fuzz user', role: 'user', tenant: 'default' }),
    headers: { 'content-type': 'application/json' },
  });
  userKey = ((await key.json()) as { secret: string }).secret;
  targets = routesOf(h.plane.app);
});
afterAll(async () => {
  agent.destroy();
  await h?.close();
});

describe('malformed JSON on every route', () => {
  it(
    'every route, every mutation, both keys, real and made-up ids: 2xx/4xx in the documented shape, never a 500 or a hang; memory bounded',
    { timeout: 240_000 },
    async () => {
      const rssBeforeBytes = process.memoryUsage().rss;
      // Each route meets each mutation once, the key and id cycling through their four pairs.
      let i = 0;
      for (const target of targets) {
        for (const mutation of Object.keys(MUTATIONS)) {
          await probe(target, i % 2 === 1, i % 4 < 2, mutation, i, 'application/json');
          await probe(target, i % 2 === 0, i % 4 >= 2, mutation, i, 'application/json', true);
          i += 1;
        }
      }
      // Then random combinations, with other JSON media types too.
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...targets),
          fc.boolean(),
          fc.boolean(),
          fc.constantFrom(...Object.keys(MUTATIONS)),
          fc.nat(),
          fc.constantFrom('application/json', 'application/json; charset=utf-8', 'application/json; charset=latin1', 'Application/JSON'),
          fc.boolean(),
          async (target, asUser, realId, mutation, n, contentType, cut) => probe(target, asUser, realId, mutation, n, contentType, cut),
        ),
        { numRuns: 400 },
      );
      // Random JSON values and text as whole bodies.
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...targets), fc.oneof(fc.json(), fc.string({ unit: 'binary' })), async (target, text) => {
          const path = concrete(target.path, false);
          const answer = await send(
            target.method,
            path,
            { authorization: `Bearer ${h.apiKey}`, 'content-type': 'application/json' },
            Buffer.from(text),
          );
          requests += 1;
          expect(
            answer.status < 500,
            `${target.method} ${path} ${JSON.stringify(text).slice(0, 200)} → ${answer.status} ${answer.body.slice(0, 300)}`,
          ).toBe(true);
          if (answer.status >= 400)
            expect(
              documentedError(path, answer.status, answer.body, false),
              `${target.method} ${path} → ${answer.body.slice(0, 300)}`,
            ).toBe(true);
          await undo(target.method, target.path, answer);
        }),
        { numRuns: 200 },
      );
      const rssGrowthBytes = process.memoryUsage().rss - rssBeforeBytes;
      console.log(
        `[fuzz] ${targets.length} routes, ${requests} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}, rss growth ${Math.round(rssGrowthBytes / 1e6)} MB`,
      );
      expect(rssGrowthBytes).toBeLessThan(1024 * 1024 * 1024);
      // The process stays up, the shared sandbox is still there, and no mutation left a lease behind.
      expect((await h.client.raw('GET', '/healthz')).status).toBe(200);
      expect((await h.client.getSandbox(leaseId)).status).toBe('ready');
      const live = (await h.client.listSandboxes()).filter((l) => l.status !== 'released' && l.status !== 'failed');
      expect(live.map((l) => l.id)).toEqual([leaseId]);
    },
  );
});
