/**
 * The agent's channel through a node relay, for sandboxes on another machine than the control
 * plane (the Kubernetes driver). The relay, one per node, serves two Unix sockets in a node
 * directory mounted into each sandbox at LINK_SOCKET_DIR: `redis.sock`, a byte pipe to Redis (the
 * agent's own ACL user authenticates it there), and `link.sock`, a byte pipe to the control
 * plane's link listener. On `link.sock` the agent first writes one LinkHeader line naming its
 * lease, the channel it wants (the egress proxy, or a byte tunnel's socket) and its lease's link
 * token; the control plane checks the token and serves the rest of the connection exactly as a
 * connection to that Unix socket on its own host. The relay holds no credential and decides
 * nothing: a connection that claims another lease fails its token check.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

/** Where the node relay's sockets appear inside a sandbox. */
export const LINK_SOCKET_DIR = '/run/sbx/link';
/** The relay's pipe to the control plane's link listener. */
export const LINK_SOCKET = `${LINK_SOCKET_DIR}/link.sock`;
/** The relay's pipe to Redis. */
export const LINK_REDIS_SOCKET = `${LINK_SOCKET_DIR}/redis.sock`;
/** Longest header line, bytes (the newline included). */
export const LINK_HEADER_MAX_BYTES = 1024;

/** The first line on `link.sock`: JSON, then `\n`. */
export const LinkHeader = z.object({
  v: z.literal(1),
  lease: z.string().min(1).max(128),
  /** `egress`: the lease's egress proxy; `tunnel`: the byte-tunnel socket `socket` of the lease's directory. */
  channel: z.enum(['egress', 'tunnel']),
  /** The tunnel socket's name (a control-plane process's, as the `socket` of its open message). */
  socket: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,100}$/)
    .optional(),
  token: z.string().min(1).max(100),
  /**
   * Set by a control-plane replica that passed the connection on to the replica serving its
   * channel (the one whose tunnel socket it names, or the one consuming the lease's returns):
   * such a connection is served where it arrives or closed, never passed on again.
   */
  forwarded: z.literal(true).optional(),
});
export type LinkHeader = z.infer<typeof LinkHeader>;

/** A lease's link token: HMAC-SHA256 of its id under the control planes' link key, base64url. */
export function linkToken(key: Buffer, leaseId: string): string {
  return createHmac('sha256', key).update(`sbx-link:${leaseId}`).digest('base64url');
}

/** Whether `token` is `leaseId`'s under `key` (constant time). */
export function validLinkToken(key: Buffer, leaseId: string, token: string): boolean {
  const expected = Buffer.from(linkToken(key, leaseId));
  const given = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
