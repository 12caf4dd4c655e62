/**
 * The MCP server's `shell` tool, driven by the official MCP client against a real control plane:
 * state carries over between calls (one persistent session per MCP session), each command's
 * own exit code, a timeout that interrupts the command and keeps the session, and the session
 * gone with the sandbox when the client goes.
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { TERMINAL_LEASE_STATUSES } from '../contract/objects.js';
import { REPO_ROOT, eventually, useHarness } from './fixtures/index.js';

const h = useHarness();

const textOf = (result: CallToolResult): string => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('');

async function shell(client: Client, args: Record<string, unknown>): Promise<CallToolResult> {
  return CallToolResultSchema.parse(await client.callTool({ name: 'shell', arguments: args }));
}

describe('sbx mcp shell tool', () => {
  it('keeps cwd, variables and functions between calls, reports exit codes, and survives a timeout', async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [join(REPO_ROOT, 'dist/cli/sbx.js'), 'mcp'],
      env: { ...(process.env as Record<string, string>), SBX_URL: h.url, SBX_API_KEY: h.apiKey },
      stderr: 'pipe',
    });
    const client = new Client({ name: 'sbx-test', version: '0.0.0' });
    await client.connect(transport);
    let sandboxId: string | undefined;
    try {
      const tool = (await client.listTools()).tools.find((t) => t.name === 'shell');
      expect(tool?.description).toMatch(/carry over/);
      const first = await shell(client, { cmd: 'cd /tmp && export WHO=agent && hi() { echo "hi $WHO"; }' });
      expect(first.isError).toBe(false);
      sandboxId = (first.structuredContent as { sandboxId: string }).sandboxId;
      const second = await shell(client, { cmd: 'pwd; hi' });
      expect(textOf(second)).toContain('/tmp');
      expect(textOf(second)).toContain('hi agent');
      const failed = await shell(client, { cmd: 'false' });
      expect(failed.isError).toBe(true);
      expect((failed.structuredContent as { exitCode: number }).exitCode).toBe(1);
      const slow = await shell(client, { cmd: 'sleep 100', timeoutMs: 1000 });
      expect((slow.structuredContent as { status: string }).status).toBe('timed_out');
      const after = await shell(client, { cmd: 'echo $WHO' });
      expect(textOf(after)).toContain('agent');
      expect((after.structuredContent as { sessionId: string }).sessionId).toBe(
        (first.structuredContent as { sessionId: string }).sessionId,
      );
    } finally {
      await client.close();
    }
    // The client went: the sandbox (and the session with it) is released.
    await eventually(
      () => h.client.getSandbox(sandboxId!),
      (l) => TERMINAL_LEASE_STATUSES.has(l.status),
      30_000,
    );
  });
});
