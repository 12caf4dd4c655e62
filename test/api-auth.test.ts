/**
 * API-key authentication at the HTTP edge, against spellings of a route the router decodes:
 * the key is checked for the route that matched, not for how the URL was written.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { useHarness } from './fixtures/index.js';

const h = useHarness();
let leaseId: string;

beforeAll(async () => {
  leaseId = (await h.client.createSandbox()).id;
});

async function call(method: string, path: string, init: { key?: string; body?: unknown } = {}): Promise<{ status: number; body: string }> {
  const headers: Record<string, string> = {};
  if (init.key) headers.authorization = `Bearer ${init.key}`;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${h.url}${path}`, { method, headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  return { status: res.status, body: await res.text() };
}

describe('authentication by matched route', () => {
  it('GET /%761/tools (percent-encoded /v1) without a key is 401 like /v1/tools; with the key it works', async () => {
    expect((await call('GET', '/v1/tools')).status).toBe(401);
    const encoded = await call('GET', '/%761/tools');
    expect(encoded.status, encoded.body.slice(0, 200)).toBe(401);
    expect((await call('GET', '/%761/tools', { key: h.apiKey })).status).toBe(200);
  });

  it('every spelling of a /v1 route needs the key: 401 auth.missing_api_key, never a handler run', async () => {
    for (const [method, path] of [
      ['GET', '/%761/sandboxes'],
      ['GET', '/%76%31/policies'],
      ['GET', '/%761/api-keys'],
      ['GET', '/%761/audit'],
      ['POST', '/%761/api-keys'],
    ] as const) {
      const r = await call(method, path, method === 'POST' ? { body: { name: 'x', role: 'admin', tenant: 'x' } } : {});
      expect([`${method} ${path}`, r.status, JSON.parse(r.body).error.code]).toEqual([`${method} ${path}`, 401, 'auth.missing_api_key']);
    }
  });

  it('`Bearer` with nothing after it (a key variable left unset) is 401 auth.missing_api_key, not invalid_api_key', async () => {
    for (const authorization of ['Bearer ', 'Bearer', 'bearer   ']) {
      const res = await fetch(`${h.url}/v1/sandboxes`, { headers: { authorization } });
      expect([authorization, res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([
        authorization,
        401,
        'auth.missing_api_key',
      ]);
    }
    const wrong = await fetch(`${h.url}/v1/sandboxes`, { headers: { authorization: 'Bearer not-a-key' } });
    expect(((await wrong.json()) as { error: { code: string } }).error.code).toBe('auth.invalid_api_key');
  });

  it('without a key, an existing sandbox cannot be told from a missing one', async () => {
    const existing = await call('GET', `/%761/sandboxes/${leaseId}/egress`);
    const missing = await call('GET', '/%761/sandboxes/sbx_00000000000000000000/egress');
    expect([existing.status, missing.status]).toEqual([401, 401]);
  });

  it('/healthz stays public', async () => {
    expect((await call('GET', '/healthz')).status).toBe(200);
  });
});

describe('audit cursors', () => {
  it.each(['0-0', '99999999999999999999-0'])('GET /v1/audit?cursor=%s is answered without a 5xx', async (cursor) => {
    const r = await call('GET', `/v1/audit?cursor=${cursor}`, { key: h.apiKey });
    expect(r.status, r.body).toBeLessThan(500);
    expect(r.status === 200 || JSON.parse(r.body).error.code === 'input.invalid').toBe(true);
  });
});
