/**
 * Hostile and malformed input at the API edge: every case is a 4xx with a stable `domain.reason`
 * code in `{error: {code, message, ...}}`, never a 500, and nothing is left half-made.
 */
import { describe, expect, it } from 'vitest';
import { ErrorBody } from '../contract/errors.js';
import { containersOf, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;

useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

async function expectError(response: Response, status: number, code: string): Promise<Record<string, unknown>> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  const body = ErrorBody.parse(JSON.parse(text));
  expect(body.error.code).toBe(code);
  expect(text).not.toMatch(/at .*\.(js|ts):\d+/);
  return body.error.details ?? {};
}

const json = { 'content-type': 'application/json' };

describe('API input', () => {
  it('rejects a request without or with a wrong API key', async () => {
    await expectError(await fetch(`${h.url}/v1/sandboxes`), 401, 'auth.missing_api_key');
    await expectError(await fetch(`${h.url}/v1/sandboxes`, { headers: { authorization: 'Bearer nope' } }), 401, 'auth.invalid_api_key');
  });

  it('malformed JSON is input.invalid_json', async () => {
    await expectError(await h.client.raw('POST', '/v1/sandboxes', { body: '{"image": ', headers: json }), 400, 'input.invalid_json');
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, { body: '{tool:exec}', headers: json }),
      400,
      'input.invalid_json',
    );
  });

  it('an unknown tool is input.unknown_tool', async () => {
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, { body: JSON.stringify({ tool: 'rm-rf', args: {} }), headers: json }),
      400,
      'input.unknown_tool',
    );
  });

  it('missing and mistyped fields are input.invalid naming each field', async () => {
    const missing = await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, { body: JSON.stringify({ tool: 'exec' }), headers: json }),
      400,
      'input.invalid',
    );
    expect(JSON.stringify(missing)).toContain('body.args');
    const noCommand = await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, { body: JSON.stringify({ tool: 'exec', args: {} }), headers: json }),
      400,
      'input.invalid',
    );
    expect(JSON.stringify(noCommand)).toContain('args.argv');
    const badTtl = await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: JSON.stringify({ ttlSeconds: 'soon' }), headers: json }),
      400,
      'input.invalid',
    );
    expect(JSON.stringify(badTtl)).toContain('body.ttlSeconds');
    const extra = await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: JSON.stringify({ privileged: true }), headers: json }),
      400,
      'input.invalid',
    );
    expect(JSON.stringify(extra)).toContain('privileged');
    await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: JSON.stringify({ env: { 'BAD NAME': 'x' } }), headers: json }),
      400,
      'input.invalid',
    );
    await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: JSON.stringify({ labels: { 'sbx.owner': 'me' } }), headers: json }),
      400,
      'input.invalid',
    );
    // A number in the query given as text is named as such, not as what coercion made of it ("received NaN").
    for (const path of [`/v1/sandboxes/${leaseId}/previews?limit=abc`, `/v1/sandboxes/${leaseId}/egress?limit=abc`]) {
      const response = await h.client.raw('GET', path);
      const text = await response.clone().text();
      await expectError(response, 400, 'input.invalid');
      expect(text).toContain('query.limit: Invalid input: expected a number');
      expect(text).not.toContain('NaN');
    }
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls?wait=forever`, {
        body: JSON.stringify({ tool: 'exec', args: { argv: ['true'] } }),
        headers: json,
      }),
      400,
      'input.invalid',
    );
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, {
        body: JSON.stringify({ tool: 'exec', args: { argv: ['true'] }, callId: '../../etc' }),
        headers: json,
      }),
      400,
      'input.invalid',
    );
  });

  it('a 10 MB body is input.body_too_large (calls: beyond 48 MiB) and creates nothing', async () => {
    const before = await containersOf(h.config.owner);
    const big = JSON.stringify({ labels: { a: 'x'.repeat(10 * 1024 * 1024) } });
    await expectError(await h.client.raw('POST', '/v1/sandboxes', { body: big, headers: json }), 413, 'input.body_too_large');
    // Calls take bodies up to 48 MiB (write_file content); a 10 MB script is refused by its field.
    const long = await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, {
        body: JSON.stringify({ tool: 'exec', args: { cmd: 'x'.repeat(10 * 1024 * 1024) } }),
        headers: json,
      }),
      400,
      'input.invalid',
    );
    expect(JSON.stringify(long)).toContain('args.cmd');
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, {
        body: JSON.stringify({ tool: 'write_file', args: { path: '/workspace/x', content: 'x'.repeat(50 * 1024 * 1024) } }),
        headers: json,
      }),
      413,
      'input.body_too_large',
    );
    expect(await containersOf(h.config.owner)).toEqual(before);
  });

  it('a wrong media type is input.unsupported_media_type', async () => {
    await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: 'image=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }),
      415,
      'input.unsupported_media_type',
    );
    await expectError(
      await h.client.raw('POST', '/v1/sandboxes', { body: '{}', headers: { 'content-type': 'text/plain' } }),
      415,
      'input.unsupported_media_type',
    );
  });

  it('unknown ids are 404 with their domain code; unknown routes are api.route_not_found', async () => {
    await expectError(await h.client.raw('GET', '/v1/sandboxes/sbx_00000000000000000000'), 404, 'lease.not_found');
    await expectError(await h.client.raw('GET', '/v1/sandboxes/not-an-id'), 404, 'lease.not_found');
    await expectError(await h.client.raw('GET', '/v1/sandboxes/bad.id'), 400, 'input.invalid');
    await expectError(await h.client.raw('GET', '/v1/receipts/rcpt_nope'), 404, 'receipt.not_found');
    await expectError(await h.client.raw('GET', `/v1/sandboxes/${leaseId}/calls/nope`), 404, 'call.not_found');
    await expectError(await h.client.raw('GET', '/v1/nothing-here'), 404, 'api.route_not_found');
  });

  it('cancelling a finished call changes nothing and answers 200 with the call', async () => {
    const done = await h.client.submitCall(leaseId, 'exec', { argv: ['true'] }, { waitSeconds: 30 });
    const response = await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls/${done.callId}/cancel`, { body: '{}', headers: json });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { result: { status: string } }).result.status).toBe('succeeded');
  });

  it('GET /v1/tools lists exec with its JSON Schema', async () => {
    const response = await h.client.raw('GET', '/v1/tools');
    const body = (await response.json()) as { tools: Array<{ name: string; inputSchema: { properties: Record<string, unknown> } }> };
    const exec = body.tools.find((t) => t.name === 'exec');
    expect(exec?.inputSchema.properties).toHaveProperty('timeoutMs');
    expect(exec?.inputSchema.properties).toHaveProperty('argv');
    expect(body.tools.map((t) => t.name).sort()).toEqual([
      'edit_file',
      'exec',
      'git_diff',
      'git_status',
      'glob',
      'list_files',
      'list_processes',
      'make_dir',
      'move',
      'read_file',
      'remove',
      'search',
      'signal_process',
      'stat',
      'write_file',
    ]);
    await expectError(
      await h.client.raw('POST', `/v1/sandboxes/${leaseId}/calls`, {
        body: JSON.stringify({ tool: 'exec', args: { argv: ['true'], pty: true } }),
        headers: json,
      }),
      400,
      'input.invalid',
    );
  });

  it('/healthz answers 200 when Redis and Docker answer', async () => {
    const response = await fetch(`${h.url}/healthz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ redis: 'ok', docker: 'ok' });
  });
});
