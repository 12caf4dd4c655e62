/**
 * Remote MCP at `/mcp` (issue 17 part 2) under the official SDK's Streamable HTTP client against
 * a real control plane and real sandboxes: a bad key is refused before anything exists; two
 * tenants' sessions each lease a sandbox of their own and cannot reach the other's (a session id
 * with another key is 404); ending a session releases its sandbox; a stream cut mid-call resumes
 * with `Last-Event-ID` and delivers the rest, result included.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiAs, eventually, startHarness, type Harness } from './fixtures/index.js';

let h: Harness;
let keyA: string;
let keyB: string;
const api = apiAs(() => h.url);
const clients: Client[] = [];

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
};

async function session(key: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: 'sbx-remote-test', version: '0.0.0' });
  await client.connect(transport);
  clients.push(client);
  return { client, transport };
}

beforeAll(async () => {
  // Sessions idle for 3 s end (SBX_MCP_IDLE_SECONDS): short enough to see, long past any gap between requests here.
  h = await startHarness({ SBX_MCP_IDLE_SECONDS: '3' });
  keyA = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'mcp a', role: 'user', tenant: 'mcp-a' })).body.secret;
  keyB = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'mcp b', role: 'user', tenant: 'mcp-b' })).body.secret;
}, 120_000);

afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await h?.close();
});

describe('remote MCP over Streamable HTTP', () => {
  it('a bad or missing key is 401 before any session or sandbox exists; a request without a session is 400', async () => {
    const before = (await h.client.listSandboxes()).length;
    const post = (headers: Record<string, string>, body: unknown) =>
      fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify(body),
      });
    const bad = await post({ authorization: 'Bearer sbx_not_a_key' }, INITIALIZE);
    expect([bad.status, ((await bad.json()) as { error: { code: string } }).error.code]).toEqual([401, 'auth.invalid_api_key']);
    const none = await post({}, INITIALIZE);
    expect(none.status).toBe(401);
    const list = await post({ authorization: `Bearer ${keyA}` }, { jsonrpc: '2.0', id: 2, method: 'tools/list' });
    expect([list.status, ((await list.json()) as { error: { code: string } }).error.code]).toEqual([400, 'mcp.session_required']);
    expect((await h.client.listSandboxes()).length).toBe(before);
  });

  it("two tenants' sessions lease a sandbox each and never reach the other's; ending a session releases its sandbox", async () => {
    const a = await session(keyA);
    const b = await session(keyB);
    const tools = (await a.client.listTools()).tools.map((t) => t.name);
    expect(tools).toEqual(expect.arrayContaining(['exec', 'read_file', 'write_file', 'shell', 'snapshot']));

    const run = async (client: Client, cmd: string) =>
      CallToolResultSchema.parse(await client.callTool({ name: 'exec', arguments: { cmd } })).structuredContent as {
        status: string;
        sandboxId: string;
      };
    const inA = await run(a.client, 'echo tenant-a > /workspace/who');
    const inB = await run(b.client, 'cat /workspace/who 2>/dev/null || echo none');
    expect([inA.status, inB.status]).toEqual(['succeeded', 'succeeded']);
    expect(inA.sandboxId).not.toBe(inB.sandboxId);
    expect((await api(keyA, 'GET', `/v1/sandboxes/${inA.sandboxId}`)).body).toMatchObject({ tenant: 'mcp-a' });
    expect((await api(keyB, 'GET', `/v1/sandboxes/${inA.sandboxId}`)).status).toBe(404);

    // A's session id with B's key is as absent as none.
    const stolen = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${keyB}`,
        'mcp-session-id': a.transport.sessionId!,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    expect([stolen.status, ((await stolen.json()) as { error: { code: string } }).error.code]).toEqual([404, 'mcp.session_not_found']);

    await a.transport.terminateSession();
    await eventually(
      async () => (await h.client.getSandbox(inA.sandboxId)).status,
      (status) => status === 'released',
      30_000,
    );
    expect((await h.client.getSandbox(inB.sandboxId)).status).toBe('ready');
  });

  it('a stream cut in the middle of a call resumes with Last-Event-ID: the later progress and the result arrive', async () => {
    const { transport } = await session(keyA);
    const headers = {
      authorization: `Bearer ${keyA}`,
      'mcp-session-id': transport.sessionId!,
      'mcp-protocol-version': '2025-03-26',
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    };
    const call = {
      jsonrpc: '2.0',
      id: 77,
      method: 'tools/call',
      params: { name: 'exec', arguments: { cmd: 'echo first; sleep 2; echo second' }, _meta: { progressToken: 'p1' } },
    };
    const cut = new AbortController();
    const response = await fetch(`${h.url}/mcp`, { method: 'POST', headers, body: JSON.stringify(call), signal: cut.signal });
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    // Read up to the first progress notification (it carries an event id), then drop the stream.
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    let lastId = '';
    while (!lastId) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended before any progress: ${text}`);
      text += value;
      for (const block of text.split('\n\n').slice(0, -1)) {
        const id = /^id: (.+)$/m.exec(block)?.[1];
        if (id && block.includes('notifications/progress')) lastId = id;
      }
    }
    expect(text).toContain('first');
    cut.abort();

    // The server sees the cut stream end a moment after the client: until then the stream still has
    // its connection, and a resume is 409 "Stream already has an active connection" (MCP SDK), which a client tries again.
    const resumed = await eventually(
      async () => {
        const answer = await fetch(`${h.url}/mcp`, { method: 'GET', headers: { ...headers, 'last-event-id': lastId } });
        if (answer.status === 409) await answer.body?.cancel();
        return answer;
      },
      (answer) => answer.status !== 409,
      10_000,
      50,
    );
    expect(resumed.status).toBe(200);
    const rest = resumed.body!.pipeThrough(new TextDecoderStream()).getReader();
    let after = '';
    while (!after.includes('"id":77')) {
      const { value, done } = await rest.read();
      if (done) break;
      after += value;
    }
    await rest.cancel();
    expect(after).toContain('second');
    expect(after).toMatch(/"id":77,"result"|"result":\{.*"id":77/s);
    expect(after).not.toContain(`id: ${lastId}\n`);
  });

  it('a call longer than the idle time finishes; a session whose client went away without DELETE ends at the idle time and its sandbox goes', async () => {
    const { client, transport } = await session(keyB);
    const long = CallToolResultSchema.parse(
      await client.callTool({ name: 'exec', arguments: { cmd: 'sleep 5; echo done' } }, undefined, { timeout: 30_000 }),
    ).structuredContent as { status: string; sandboxId: string };
    expect(long.status).toBe('succeeded');
    // The client vanishes: its streams close, no DELETE is sent.
    await transport.close();
    await eventually(
      async () => (await h.client.getSandbox(long.sandboxId)).status,
      (status) => status === 'released',
      30_000,
    );
  });

  it('a session ended while its first tool call is leasing leaves no sandbox behind', async () => {
    const key = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'mcp race', role: 'user', tenant: 'mcp-race' })).body.secret;
    const { client, transport } = await session(key);
    // The call is sent, and the session ended right behind it: the lease races the end.
    const call = client.callTool({ name: 'exec', arguments: { cmd: 'true' } }).catch(() => null);
    await transport.terminateSession();
    await call;
    await eventually(
      async () => (await api(key, 'GET', '/v1/sandboxes')).body.sandboxes.filter((l: { status: string }) => l.status !== 'released'),
      (live) => live.length === 0,
      30_000,
    );
  });

  it('one key may hold 16 sessions: the 17th is 429 mcp.session_limit; another key is unaffected', async () => {
    const key = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'mcp many', role: 'user', tenant: 'mcp-many' })).body.secret;
    const opened = await Promise.all(Array.from({ length: 16 }, () => session(key)));
    const refused = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(INITIALIZE),
    });
    expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([429, 'mcp.session_limit']);
    await session(keyA);
    await opened[0]!.transport.terminateSession();
    await session(key);
  });

  it('the control plane stopping ends every session and releases its sandbox, with clients still connected', async () => {
    const { client } = await session(keyA);
    const ran = CallToolResultSchema.parse(await client.callTool({ name: 'exec', arguments: { cmd: 'true' } })).structuredContent as {
      sandboxId: string;
    };
    await h.restart();
    expect((await h.client.getSandbox(ran.sandboxId)).status).toBe('released');
  });
});
