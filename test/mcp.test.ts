/**
 * `sbx mcp` driven by the official MCP client (`Client` + `StdioClientTransport`, spawning the
 * built CLI) against a real control plane: the tool list with the platform's schemas and the
 * semantics in the descriptions, a lazily leased sandbox, exec and write/read, tool errors as
 * isError results with the platform's code, protocol errors as protocol errors, the sandbox
 * released when the client goes, and the `snapshot` tool whose id a second session
 * (`--snapshot`) starts from.
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { TERMINAL_LEASE_STATUSES } from '../contract/objects.js';
import { REPO_ROOT, useHarness, eventually } from './fixtures/index.js';

const h = useHarness();

/** An MCP client connected to a fresh `sbx mcp` process, and that process's transport. */
async function connectMcp(...options: string[]): Promise<{ client: Client; transport: StdioClientTransport }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [join(REPO_ROOT, 'dist/cli/sbx.js'), 'mcp', ...options],
    env: { ...(process.env as Record<string, string>), SBX_URL: h.url, SBX_API_KEY: h.apiKey },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'sbx-test', version: '0.0.0' });
  await client.connect(transport);
  return { client, transport };
}

/** An MCP client connected to a fresh `sbx mcp` process. */
async function connectClient(...options: string[]): Promise<Client> {
  return (await connectMcp(...options)).client;
}

const textOf = (result: CallToolResult): string => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('');

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return CallToolResultSchema.parse(await client.callTool({ name, arguments: args }));
}

/** The tenant's sandboxes that are not ended. */
async function liveSandboxes(): Promise<string[]> {
  return (await h.client.listSandboxes()).filter((l) => !TERMINAL_LEASE_STATUSES.has(l.status)).map((l) => l.id);
}

describe('sbx mcp', () => {
  it('lists the platform tools with their JSON Schemas and the timeout, truncation and effect semantics, leasing nothing', async () => {
    const client = await connectClient();
    try {
      const { tools } = await client.listTools();
      const platform = (await h.client.listTools()).map((t) => t.name).sort();
      expect(tools.map((t) => t.name).sort()).toEqual([...platform, 'shell', 'snapshot'].sort());
      const exec = tools.find((t) => t.name === 'exec')!;
      expect(exec.inputSchema.type).toBe('object');
      expect(Object.keys(exec.inputSchema.properties ?? {})).toEqual(expect.arrayContaining(['cmd', 'argv', 'cwd', 'timeoutMs']));
      expect(exec.description).toMatch(/timeoutMs/);
      expect(exec.description).toMatch(/not "no effect"/);
      expect(exec.description).toMatch(/4 MiB/);
      expect(exec.description).toMatch(/not a receipt/);
      expect(tools.find((t) => t.name === 'write_file')!.description).toMatch(/atomically/);
      expect(await liveSandboxes()).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it('runs exec and write/read in one lazily leased sandbox, returns tool errors as isError with the code, and releases the sandbox when the client closes', async () => {
    const client = await connectClient();
    let sandboxId: string | undefined;
    try {
      const exec = await call(client, 'exec', { cmd: 'echo hello from mcp; echo warn >&2' });
      expect(exec.isError).toBe(false);
      expect(textOf(exec)).toContain('hello from mcp');
      expect(textOf(exec)).toMatch(/\[sbx\] status=succeeded exitCode=0 receipt=\S+ commitState=committed/);
      sandboxId = (exec.structuredContent as { sandboxId: string }).sandboxId;
      expect(await liveSandboxes()).toEqual([sandboxId]);

      const write = await call(client, 'write_file', { path: '/workspace/mcp.txt', content: 'written over mcp\n' });
      expect(write.isError).toBe(false);
      const read = await call(client, 'read_file', { path: '/workspace/mcp.txt' });
      expect(read.isError).toBe(false);
      expect(textOf(read)).toContain('written over mcp');
      expect((read.structuredContent as { sandboxId: string }).sandboxId).toBe(sandboxId);

      // A call that ran and failed: isError, with the platform's code.
      const missing = await call(client, 'read_file', { path: '/workspace/missing.txt' });
      expect(missing.isError).toBe(true);
      expect(textOf(missing)).toContain('code=files.not_found');
      expect((missing.structuredContent as { error: { code: string } }).error.code).toBe('files.not_found');
      const exit = await call(client, 'exec', { cmd: 'exit 4' });
      expect(exit.isError).toBe(true);
      expect(textOf(exit)).toMatch(/code=execution\.nonzero_exit .*exitCode=4/);

      // A background exec answers with its handle once it runs, not when it ends.
      const startedMs = Date.now();
      const background = await call(client, 'exec', { cmd: 'sleep 600', background: true });
      expect(background.isError, textOf(background)).toBe(false);
      expect((background.structuredContent as { status: string }).status).toBe('detached');
      expect(Date.now() - startedMs).toBeLessThan(60_000);
      await h.client.cancelCall(sandboxId, (background.structuredContent as { callId: string }).callId);

      // A call the platform refused at submission (HTTP 400): still a tool error with the code.
      const invalid = await call(client, 'exec', { cwd: '/workspace' });
      expect(invalid.isError).toBe(true);
      expect((invalid.structuredContent as { error: { code: string } }).error.code).toBe('input.invalid');
      expect(textOf(invalid)).toContain('args.argv');
      const outside = await call(client, 'read_file', { path: '/etc/shadow' });
      expect((outside.structuredContent as { error: { code: string } }).error.code).toBe('input.path_outside_workspace');

      // An unknown tool is a protocol error, not a tool result.
      const unknown = await client.callTool({ name: 'rm_rf', arguments: {} }).catch((err: unknown) => err);
      expect(unknown).toBeInstanceOf(McpError);
      expect((unknown as McpError).message).toContain('unknown tool');
      expect(await liveSandboxes()).toEqual([sandboxId]);
    } finally {
      await client.close();
    }
    await eventually(
      () => h.client.getSandbox(sandboxId!),
      (l) => l.status === 'released',
      20_000,
    );
    expect(await liveSandboxes()).toEqual([]);
  });

  it('SIGTERM releases the sandbox too', async () => {
    const { client, transport } = await connectMcp();
    const exec = await call(client, 'exec', { cmd: 'true' });
    const sandboxId = (exec.structuredContent as { sandboxId: string }).sandboxId;
    process.kill(transport.pid!, 'SIGTERM');
    await eventually(
      () => h.client.getSandbox(sandboxId),
      (l) => l.status === 'released',
      20_000,
    );
    await client.close();
  });

  it('the snapshot tool checkpoints the sandbox (with a --writable-root) and a second sbx mcp --snapshot session sees its files', async () => {
    let snapshotId: string | undefined;
    const first = await connectClient('--writable-root', '/testbed:16777216');
    const sandboxes: string[] = [];
    try {
      const tool = (await first.listTools()).tools.find((t) => t.name === 'snapshot');
      expect(tool?.description).toMatch(/--snapshot/);
      const wrote = await call(first, 'exec', { cmd: 'echo from first > /workspace/first.txt && echo root > /testbed/t.txt' });
      expect(wrote.isError).toBe(false);
      sandboxes.push((wrote.structuredContent as { sandboxId: string }).sandboxId);
      const snap = await call(first, 'snapshot', {});
      expect(snap.isError).toBe(false);
      snapshotId = (snap.structuredContent as { snapshotId: string }).snapshotId;
      expect(snapshotId).toMatch(/^snap_[a-f0-9]{20}$/);
      expect(textOf(snap)).toContain(`snapshot=${snapshotId}`);
      const bad = await first.callTool({ name: 'snapshot', arguments: { ttlSeconds: -1 } }).catch((err: unknown) => err);
      expect(bad).toBeInstanceOf(McpError);
    } finally {
      await first.close();
    }
    const second = await connectClient('--snapshot', snapshotId!);
    try {
      const seen = await call(second, 'exec', { cmd: 'cat /workspace/first.txt /testbed/t.txt' });
      expect(seen.isError).toBe(false);
      expect(textOf(seen)).toContain('from first\nroot');
      const id = (seen.structuredContent as { sandboxId: string }).sandboxId;
      sandboxes.push(id);
      expect((await h.client.getSandbox(id)).manifest?.snapshot?.id).toBe(snapshotId);
    } finally {
      await second.close();
      for (const id of sandboxes)
        await eventually(
          () => h.client.getSandbox(id),
          (l) => TERMINAL_LEASE_STATUSES.has(l.status),
          20_000,
        ).catch(() => undefined);
      if (snapshotId) await h.client.deleteSnapshot(snapshotId).catch(() => undefined);
    }
  });
});
