/**
 * Dials one of the control plane's Unix sockets for the agent: the socket itself on the control
 * plane's host (a Docker sandbox), or, where the agent config has a `link` (a sandbox on another
 * machine), the node relay's `link.sock` with a LinkHeader line naming the channel first
 * (contract/link.ts). The caller writes and reads as on the socket itself.
 */
import net from 'node:net';
import type { LinkHeader } from '../../contract/link.js';
import type { AgentConfig } from '../../contract/queue.js';

/** Where the agent is: its lease and its link (null: the sockets are on this host). */
export interface LinkRoute {
  leaseId: string;
  link: AgentConfig['link'];
}

/**
 * A connection to `options.path`, or through `route.link` to `channel` (`socket`: the tunnel
 * socket's name). Connect options other than the path are kept.
 */
export function dialChannel(
  options: net.NetConnectOpts & { path: string },
  route: LinkRoute,
  channel: Pick<LinkHeader, 'channel' | 'socket'>,
): net.Socket {
  if (route.link === null) return net.connect(options);
  const socket = net.connect({ ...options, path: route.link.path });
  const header: LinkHeader = { v: 1, lease: route.leaseId, ...channel, token: route.link.token };
  // Written before the caller's first bytes (writes before 'connect' are queued in order).
  socket.write(`${JSON.stringify(header)}\n`);
  return socket;
}
