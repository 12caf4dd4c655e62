/**
 * Port previews (issue 13 part 8): how a server listening inside a sandbox is reached from
 * outside through the control plane, with no network of the sandbox's own.
 *
 * The agent dials out, never the other way. For each preview connection the control plane
 * publishes a `PreviewOpen` on the lease's `control` channel; the agent connects to
 * 127.0.0.1:`port` inside the sandbox and to the tunnel socket `socket` in PREVIEW_SOCKET_DIR
 * (a per-lease host directory mounted into the sandbox, so no sandbox sees another's sockets),
 * writes one `PreviewDialed` line (JSON + `\n`, at most PREVIEW_HEADER_MAX_BYTES) naming the
 * connection, then pipes bytes both ways. Nothing else crosses: the bytes after the line are the
 * TCP stream of the server in the sandbox. A transport other than a Unix socket (TCP, for a
 * runtime where the control plane is not on the sandbox's host) only changes what `socket` names.
 *
 * Pooled connections, so that a request needs no control message: after a `PreviewOpen` the
 * agent also keeps PREVIEW_POOL_SIZE idle connections to that socket, each opened with a
 * `PreviewPoolHello` line carrying the open's `poolKey`. The control plane hands an idle one a
 * connection by writing one `PreviewAssign` line on it; the agent answers with the same
 * `PreviewDialed` line as above, then pipes, and opens a new idle connection in its place. A
 * pooled connection that closes unassigned (the listener stopped) is not replaced.
 *
 * Early data, so that a request waits for no round trip through the agent: a control plane that
 * sends it says `early: true` in its `PreviewOpen`; the agent's pooled connections to that socket
 * then say `early: true` in their hello, and take the client's first bytes right behind a
 * `PreviewAssign` with `early: true`. The agent holds them until the port answered, writes its
 * `PreviewDialed` line as always, then passes them to the server before anything else; when
 * the port did not answer they are dropped with the connection. The control plane still reads
 * the line before the server's bytes. On such a connection a success line may wait up to 20 ms
 * for the server's first bytes, to leave with them in one write (the control plane waits for
 * nothing else meanwhile); a refusal leaves at once. Each side uses it only when the other said so: an agent
 * of an older version in a running sandbox, or a control plane of an older version serving the
 * same lease, gets the plain exchange.
 */
import { z } from 'zod';

/** Where the lease's preview tunnel socket directory appears inside a sandbox (root only). */
export const PREVIEW_SOCKET_DIR = '/run/sbx/previews';

/** A tunnel socket's name in PREVIEW_SOCKET_DIR: one per control-plane process and lease. */
export const PreviewSocketName = z.string().regex(/^[a-f0-9]{16}\.sock$/);

/** A preview connection's id: 128 random bits, base64url. Unguessable: it is the connection's only name. */
export const PreviewConnId = z.string().regex(/^[A-Za-z0-9_-]{22}$/);

/** Largest first line the agent writes on a tunnel connection, bytes (with its `\n`). */
export const PREVIEW_HEADER_MAX_BYTES = 1024;

/** The JSON value of one tunnel line, or null when it is not JSON (then no schema matches it). */
export function parseTunnelLine(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** Idle pooled connections the agent keeps open to one tunnel socket (the control plane accepts no more). */
export const PREVIEW_POOL_SIZE = 4;

/**
 * Control plane → agent (`control` channel): open preview connection `connId` to 127.0.0.1:`port`,
 * and keep a pool of idle connections to `socket`, each introduced by `poolKey` (128 random bits
 * of that socket's listener, base64url).
 */
export const PreviewOpen = z.object({
  type: z.literal('preview_open'),
  connId: PreviewConnId,
  port: z.number().int().min(1).max(65535),
  socket: PreviewSocketName,
  poolKey: PreviewConnId,
  /** The control plane sends early data on pooled connections that say they take it. */
  early: z.literal(true).optional(),
});
export type PreviewOpen = z.infer<typeof PreviewOpen>;

/** Agent → control plane, the first line of an idle pooled connection; `early`: this agent takes early data. */
export const PreviewPoolHello = z.object({ pool: PreviewConnId, early: z.literal(true).optional() }).strict();
export type PreviewPoolHello = z.infer<typeof PreviewPoolHello>;

/**
 * Control plane → agent, on an idle pooled connection: it now carries connection `id` to
 * 127.0.0.1:`port`; `early`: the client's bytes follow this line at once (only to an agent whose
 * hello said `early`).
 */
export const PreviewAssign = z
  .object({ id: PreviewConnId, port: z.number().int().min(1).max(65535), early: z.literal(true).optional() })
  .strict();
export type PreviewAssign = z.infer<typeof PreviewAssign>;

/**
 * Agent → control plane, the first line on a tunnel connection: the port answered (`ok`), or
 * why not: `refused` (nothing listens there), `reserved` (a port the agent itself serves, never
 * exposed), `failed` (any other error; `message` says which).
 */
export const PreviewDialed = z.discriminatedUnion('ok', [
  z.object({ id: PreviewConnId, ok: z.literal(true) }),
  z.object({ id: PreviewConnId, ok: z.literal(false), code: z.enum(['refused', 'reserved', 'failed']), message: z.string().max(300) }),
]);
export type PreviewDialed = z.infer<typeof PreviewDialed>;

/**
 * One preview connection in the sandbox's preview log (`GET /v1/sandboxes/:id/previews`),
 * written when it ends or is refused: who, which port, how, the bytes each way and how long.
 */
export const PreviewEvent = z.object({
  /** When the request reached the control plane (ISO 8601). */
  at: z.string(),
  port: z.number().int(),
  /** `api`: `/v1/sandboxes/:id/ports/:port/*` with an API key; `url`: a signed URL; `host`: host-based routing. */
  via: z.enum(['api', 'url', 'host']),
  /** The API key that made the request, or that minted the signed URL, and its tenant. */
  keyId: z.string(),
  tenant: z.string(),
  /** `websocket` for an upgraded connection (any `Upgrade`), else `http`. */
  kind: z.enum(['http', 'websocket']),
  method: z.string(),
  /** The path asked of the server in the sandbox, without the query; at most 512 characters. */
  path: z.string(),
  /** The status the server answered (101 for a WebSocket), null when it answered none. */
  status: z.number().int().nullable(),
  /** `completed`, `aborted` (a side closed mid-response), or why it never reached the server. */
  outcome: z.enum(['completed', 'aborted', 'denied', 'invalid_path', 'port_closed', 'upstream_failed', 'agent_unreachable']),
  /** Bytes sent to the server in the sandbox (request head and body, or WebSocket frames) and back. */
  bytesToSandbox: z.number().int().nonnegative(),
  bytesFromSandbox: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
  /** Why it failed, when it did. */
  error: z.string().nullable(),
});
export type PreviewEvent = z.infer<typeof PreviewEvent>;

/** `POST /v1/sandboxes/:id/ports/:port/url`: a signed URL a browser opens without an API key. */
export const PreviewUrl = z.object({
  url: z.string(),
  /** The path form (`/v1/previews/<id>/<token>/`), whatever `url` is; joined to the API's base URL. */
  path: z.string(),
  /** The host-based form when the control plane has a preview domain (`SBX_PREVIEW_DOMAIN`), else null. */
  hostUrl: z.string().nullable(),
  expiresAt: z.string(),
  port: z.number().int(),
});
export type PreviewUrl = z.infer<typeof PreviewUrl>;
