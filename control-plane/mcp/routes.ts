/**
 * `/mcp`: the sbx MCP server over Streamable HTTP (MCP specification 2025-03-26 and later; the
 * official SDK's server transport), authenticated by the API key like every route (the auth
 * hook answers a missing or bad key `401` before anything is made). `POST` an `initialize`
 * without `Mcp-Session-Id` to open a session (`?policy=NAME&ttlSeconds=N` choose its sandbox's
 * lease); every later request names the session; `GET` opens or resumes (`Last-Event-ID`) the
 * server's stream; `DELETE` ends the session and releases its sandbox (mcp/sessions.ts).
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import type { Principal } from '../http/auth.js';
import { McpSessions } from './sessions.js';

export interface McpRoutesOptions {
  /** A session unused this long ends, ms. */
  idleMs: number;
  /** Releases a session's sandbox in this process, as the session's principal. */
  release: (sandboxId: string, by: Principal) => Promise<unknown>;
  /** How often idle sessions are looked for, ms. Default a tenth of `idleMs`, at most a minute. */
  sweepMs?: number;
}

/** Largest MCP message body, bytes: a `write_file` of 32 MiB, base64, fits. */
const MCP_BODY_LIMIT_BYTES = 48 * 1024 * 1024;

const McpQuery = z
  .object({
    /** The policy of the session's sandbox (default `default`). */
    policy: z.string().min(1).max(100).optional(),
    /** The sandbox lease's TTL, seconds. */
    ttlSeconds: z.coerce.number().int().positive().optional(),
  })
  .strict();

/** This control plane's own API as seen from the connection the request came on: where a session's calls go. */
function selfUrl(request: FastifyRequest): string {
  const { localAddress = '127.0.0.1', localPort } = request.socket;
  const host = localAddress.includes(':') ? `[${localAddress}]` : localAddress;
  return `http://${host}:${localPort}`;
}

export const mcpRoutes: FastifyPluginAsync<McpRoutesOptions> = async (plugin, { idleMs, sweepMs, release }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const sessions = new McpSessions({ idleMs, now: () => Date.now(), release });
  const sweep = setInterval(() => void sessions.closeIdle(), sweepMs ?? Math.min(60_000, Math.max(1000, idleMs / 10)));
  sweep.unref();
  // Before the server stops taking connections (its close waits for the clients' open streams):
  // every session's streams end and its sandbox is released.
  app.addHook('preClose', async () => {
    clearInterval(sweep);
    await sessions.closeAll();
  });

  app.route({
    method: ['GET', 'POST', 'DELETE'],
    url: '/mcp',
    bodyLimit: MCP_BODY_LIMIT_BYTES,
    schema: {
      tags: ['mcp'],
      summary: 'MCP over Streamable HTTP: the sbx tools on a sandbox of the session’s own',
      description:
        '`POST` an `initialize` request without `Mcp-Session-Id` to open a session (its id comes back in that header); send it on every later request. `GET` opens the server stream (`Last-Event-ID` resumes it), `DELETE` ends the session and releases its sandbox. `404 mcp.session_not_found` for a session this key did not open or that ended; `400 mcp.session_required` for a request other than `initialize` without one.',
      querystring: McpQuery,
    },
    handler: async (request, reply) => {
      const sessionId = request.headers['mcp-session-id'];
      let session;
      if (typeof sessionId === 'string') {
        session = sessions.get(sessionId, request.principal);
        if (!session)
          throw new AppError('mcp.session_not_found', `no MCP session ${sessionId.slice(0, 80)} is open for this API key`, {
            details: { sessionId: sessionId.slice(0, 80) },
          });
      } else {
        if (request.method !== 'POST' || !isInitializeRequest(request.body))
          throw new AppError('mcp.session_required', 'send Mcp-Session-Id, or POST an initialize request to open a session');
        // The auth hook accepted this header: the session's calls go with the caller's own key.
        const apiKey = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? '')![1]!;
        const { policy, ttlSeconds } = request.query as z.infer<typeof McpQuery>;
        session = sessions.open(request.principal, apiKey, selfUrl(request), {
          ...(policy ? { policy } : {}),
          ...(ttlSeconds ? { ttlSeconds } : {}),
        });
        await session.mcp.server.connect(session.transport);
      }
      // The transport writes the answer (JSON or an SSE stream) on the raw response itself.
      reply.hijack();
      const answered = new Promise<void>((resolve) => reply.raw.once('close', resolve));
      await sessions.serving(
        session,
        session.transport.handleRequest(request.raw, reply.raw, request.body).then(() => answered),
      );
    },
  });
};
