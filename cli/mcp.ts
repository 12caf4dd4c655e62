/**
 * `sbx mcp`: the sbx MCP server (sdk/mcp-server.ts) on this process's stdio. The sandbox is
 * released when the client goes (stdin closes) or on SIGTERM/SIGINT.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { createMcpServer, type McpServerOptions } from '../sdk/mcp-server.js';

/** Serves MCP on stdio until the client goes; releases the sandbox (if one was leased) before exiting. Resolves once serving started. */
export async function runMcpServer(options: McpServerOptions): Promise<void> {
  const { server, release } = createMcpServer({
    ...options,
    onReleaseError: (id, err) => process.stderr.write(`sbx mcp: release of ${id} failed: ${err.message}\n`),
  });
  let closing: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    closing ??= (async () => {
      await release();
      await server.close().catch(() => undefined);
      process.exit(0);
    })();
    return closing;
  };
  // The client closing our stdin is the end of the session (MCP stdio transport).
  process.stdin.once('end', () => void shutdown());
  process.once('SIGTERM', () => void shutdown());
  process.once('SIGINT', () => void shutdown());
  await server.connect(new StdioServerTransport());
}
