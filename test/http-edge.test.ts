/**
 * Errors at the framework edge, over a real TCP socket against a real control plane: every error
 * that fastify or Node's HTTP parser meets before a route runs (a body cut short, bad media type,
 * body too large, bad or empty JSON, unknown route, wrong method, oversized headers or path
 * segments, unparsable requests) answers in the documented shape with a catalogue code and its
 * status, nothing is logged as unexpected, and the process answers afterwards.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES, ErrorBody, type ErrorCode } from '../contract/errors.js';
import { startHarness, type Harness, rawExchange, rawRequest, type RawResponse } from './fixtures/index.js';

/** SBX_REQUEST_TIMEOUT_MS of this file's control plane: far above any request of the other tests here. */
const REQUEST_TIMEOUT_MS = 3000;
let h: Harness;
let port: number;
let leaseId: string;
/** The control plane's log lines at warn and above, parsed. */
const logged: Array<{ level: number; msg?: string }> = [];

beforeAll(async () => {
  const logStream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        logged.push(JSON.parse(line) as { level: number; msg?: string });
      done();
    },
  });
  // A short whole-request limit, so that a stalled body is answered within the test.
  h = await startHarness({ SBX_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) }, { logStream });
  port = Number(new URL(h.url).port);
  leaseId = (await h.client.createSandbox()).id;
});
afterAll(async () => h?.close());

const auth = (): Record<string, string> => ({ authorization: `Bearer ${h.apiKey}` });
const json = (): Record<string, string> => ({ ...auth(), 'content-type': 'application/json' });

/** Asserts the documented error shape, the code, and the status the catalogue gives the code. */
function expectEdgeError(response: RawResponse | null, code: ErrorCode): RawResponse {
  expect(response, 'the server answered').not.toBeNull();
  const r = response!;
  expect(r.headers['content-type']).toMatch(/^application\/json/);
  const body = ErrorBody.parse(JSON.parse(r.body));
  expect(body.error.code, r.body).toBe(code);
  expect(r.status, r.body).toBe(ERROR_CODES[code].status);
  expect(r.body).not.toMatch(/FST_ERR|statusCode|at .*\.(js|ts):\d+/);
  return r;
}

async function stillAnswers(): Promise<void> {
  const health = await rawExchange(port, rawRequest('GET', '/healthz', {}));
  expect(health?.status).toBe(200);
  expect((await h.client.raw('GET', '/v1/sandboxes')).status).toBe(200);
}

describe('the framework edge', () => {
  it('a body cut short by the client (end of stream mid-body) is 400 input.body_aborted, on a JSON route and on the upload route', async () => {
    const json5 = rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 100 }, '{"ima');
    expectEdgeError(await rawExchange(port, json5, 'half'), 'input.body_aborted');
    const chunked = rawRequest(
      'POST',
      `/v1/sandboxes/${leaseId}/calls`,
      { ...json(), 'transfer-encoding': 'chunked' },
      '40\r\n{"tool":"exec"',
    );
    expectEdgeError(await rawExchange(port, chunked, 'half'), 'input.body_aborted');
    const tar = rawRequest(
      'PUT',
      `/v1/sandboxes/${leaseId}/files?path=/workspace/cut`,
      { ...auth(), 'content-type': 'application/x-tar', 'content-length': 100 * 1024 },
      Buffer.alloc(50 * 1024),
    );
    expectEdgeError(await rawExchange(port, tar, 'half'), 'input.body_aborted');
    const ls = await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls?wait=30`, {
      body: JSON.stringify({ tool: 'exec', args: { cmd: 'ls -A /workspace' } }),
      headers: json(),
    });
    expect(((await ls.json()) as { stdout: string }).stdout).not.toContain('cut');
    await stillAnswers();
  });

  it('a body that stops arriving is 408 input.request_timeout once the request timeout passed, and nothing is leased', async () => {
    const before = (await h.client.listSandboxes()).length;
    const startedMs = Date.now();
    // 17 of the 100 bytes announced, then nothing, the connection held open.
    const stalled = rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 100 }, '{"image": "stall');
    const r = expectEdgeError(await rawExchange(port, stalled, 'keep', REQUEST_TIMEOUT_MS + 15_000), 'input.request_timeout');
    expect(r.headers.connection).toBe('close');
    expect(Date.now() - startedMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS);
    expect((await h.client.listSandboxes()).length).toBe(before);
  });

  it('a request refused on its headers while its body stalls gets that one answer, never a later 408, and the connection ends', async () => {
    // Keep-alive (no `connection: close`), a wrong key, 1 of 100 announced body bytes, then nothing.
    const head = ['POST /v1/sandboxes HTTP/1.1', 'host: 127.0.0.1', 'authorization: Bearer sbx_wrongwrongwrongwrong'];
    const request = `${[...head, 'content-type: application/json', 'content-length: 100'].join('\r\n')}\r\n\r\n{`;
    const r = expectEdgeError(await rawExchange(port, request, 'keep', REQUEST_TIMEOUT_MS + 15_000), 'auth.invalid_api_key');
    // Everything after the head is the 401's body alone: no second response came on the connection.
    expect(r.body).not.toMatch(/HTTP\/1\.1|request_timeout/);
  });

  it('a connection reset mid-body gets no answer and leaves the process answering', async () => {
    const reset = rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 1000 }, '{"image":');
    expect(await rawExchange(port, reset, 'reset')).toBeNull();
    await stillAnswers();
  });

  it('a wrong or missing media type is 415 input.unsupported_media_type', async () => {
    expectEdgeError(
      await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...auth(), 'content-type': 'text/plain', 'content-length': 2 }, '{}')),
      'input.unsupported_media_type',
    );
    expectEdgeError(
      await rawExchange(
        port,
        rawRequest(
          'POST',
          '/v1/sandboxes',
          { ...auth(), 'content-type': 'application/x-www-form-urlencoded', 'content-length': 7 },
          'image=x',
        ),
      ),
      'input.unsupported_media_type',
    );
    expectEdgeError(
      await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...auth(), 'content-length': 2 }, '{}')),
      'input.unsupported_media_type',
    );
  });

  it('a body over the limit is 413 input.body_too_large, refused on its Content-Length before it is read', async () => {
    const big = rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 64 * 1024 * 1024 }, '{"labels":');
    const r = expectEdgeError(await rawExchange(port, big, 'keep'), 'input.body_too_large');
    expect(r.headers.connection).toBe('close');
    // The limit is named (the JSON routes' 1 MiB).
    expect(ErrorBody.parse(JSON.parse(r.body)).error.details).toEqual({ maxBytes: 1024 * 1024 });
  });

  it('malformed JSON, an empty JSON body and prototype-poisoning keys are 400 input.invalid_json', async () => {
    for (const body of ['{"image": ', '{tool:exec}', '{"__proto__": {"admin": true}}', '{"constructor": {"prototype": {"admin": true}}}']) {
      expectEdgeError(
        await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': Buffer.byteLength(body) }, body)),
        'input.invalid_json',
      );
    }
    expectEdgeError(await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 0 })), 'input.invalid_json');
  });

  it('a body that fails its schema is 400 input.invalid naming the field', async () => {
    const body = JSON.stringify({ ttlSeconds: 'soon' });
    const r = expectEdgeError(
      await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': body.length }, body)),
      'input.invalid',
    );
    expect(r.body).toContain('body.ttlSeconds');
    // A body of JSON null is not "no body": refused like [] (it leased a default sandbox).
    const before = (await h.client.listSandboxes()).length;
    for (const refused of ['null', '[]']) {
      const request = rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': refused.length }, refused);
      expect(expectEdgeError(await rawExchange(port, request), 'input.invalid').body).toContain('expected object');
    }
    expect((await h.client.listSandboxes()).length).toBe(before);
  });

  it('an unknown route is 404 api.route_not_found, also without a key', async () => {
    expectEdgeError(await rawExchange(port, rawRequest('GET', '/v1/nothing-here', auth())), 'api.route_not_found');
    expectEdgeError(await rawExchange(port, rawRequest('POST', '/nope', {})), 'api.route_not_found');
  });

  it('a known path with a method it does not take is 405 api.method_not_allowed with Allow', async () => {
    const r = expectEdgeError(await rawExchange(port, rawRequest('PATCH', '/v1/sandboxes', auth())), 'api.method_not_allowed');
    expect(r.headers.allow?.split(', ')).toEqual(expect.arrayContaining(['GET', 'POST']));
    expect(ErrorBody.parse(JSON.parse(r.body)).error.details?.allow).toEqual(r.headers.allow?.split(', '));
    const one = expectEdgeError(
      await rawExchange(port, rawRequest('PUT', `/v1/sandboxes/${leaseId}/calls/c1/cancel`, auth())),
      'api.method_not_allowed',
    );
    expect(one.headers.allow).toBe('POST');
    expectEdgeError(await rawExchange(port, rawRequest('DELETE', '/healthz', {})), 'api.method_not_allowed');
  });

  it('headers over the limit are 431 input.headers_too_large; a path segment over 100 characters is 414 input.url_too_long', async () => {
    expectEdgeError(
      await rawExchange(port, rawRequest('GET', '/v1/sandboxes', { ...auth(), 'x-big': 'a'.repeat(20_000) }), 'keep'),
      'input.headers_too_large',
    );
    expectEdgeError(await rawExchange(port, rawRequest('GET', `/${'a'.repeat(20_000)}`, auth()), 'keep'), 'input.headers_too_large');
    expectEdgeError(await rawExchange(port, rawRequest('GET', `/v1/sandboxes/${'a'.repeat(200)}`, auth())), 'input.url_too_long');
  });

  it('requests the parser cannot read are 400 input.malformed_request naming what it found', async () => {
    const r = expectEdgeError(await rawExchange(port, 'HELLO\r\n\r\n'), 'input.malformed_request');
    expect(ErrorBody.parse(JSON.parse(r.body)).error.details?.reason).toMatch(/^HPE_/);
    expectEdgeError(
      await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...json(), 'content-length': 'abc' }, '{}')),
      'input.malformed_request',
    );
    expectEdgeError(await rawExchange(port, rawRequest('GET', '/v1/sandboxes/%E0%A4%A', auth())), 'input.malformed_request');
    expectEdgeError(
      await rawExchange(port, rawRequest('POST', '/v1/sandboxes', { ...json(), 'transfer-encoding': 'chunked' }, 'zz\r\n{}\r\n0\r\n\r\n')),
      'input.malformed_request',
    );
  });

  it('after all of it the process answers and logged nothing unexpected', async () => {
    await stillAnswers();
    expect(logged.filter((l) => l.level >= 50)).toEqual([]);
    expect(logged.filter((l) => l.msg === 'unexpected error')).toEqual([]);
  });
});
