/**
 * Control-plane replicas behind one link address (a Service, a load balancer): the node relays
 * bring an agent's connection to whichever replica the address picks, but its channel is served
 * by one process — a byte tunnel by the replica that asked for it (its socket name says which,
 * tunnels.ts), the egress proxy by the replica consuming the lease's returns (returns-in.ts). A
 * replica that does not serve the channel passes the connection on to the one that does, at the
 * link address that replica keeps in its liveness key (liveness.ts), marking the header
 * `forwarded` so that it is never passed on twice. The token was checked here and is checked
 * again there; the bytes are piped both ways, half-open (contract/splice.ts).
 */
import net from 'node:net';
import type { Logger } from 'pino';
import type { LinkHeader } from '../../contract/link.js';
import { spliceSockets, tlsOver } from '../../contract/splice.js';

/**
 * The name of process `processId`'s tunnel socket in every lease directory: one per process, so
 * peers never take each other's path, and a replica handed a connection for another's socket
 * knows whose it is (`tunnelSocketOwner`).
 */
export function tunnelSocketName(processId: string): string {
  return `${processId}.sock`;
}

/** The process whose tunnel socket `socketName` is; null for a name no process gives. */
export function tunnelSocketOwner(socketName: string): string | null {
  return /^([0-9a-f]{16})\.sock$/.exec(socketName)?.[1] ?? null;
}

/** How long the replica a connection is passed on to has to accept it, ms. */
const CONNECT_TIMEOUT_MS = 5000;

export interface LinkPeersDeps {
  /** This process's id (`Liveness.processId`). */
  processId: string;
  /** The process consuming a lease's returns, which serves its egress proxy (`ReturnsIn.consumerOf`). */
  consumerOf(leaseId: string): Promise<string | null>;
  /** A live process's link address, `host:port` (`Liveness.linkAddressOf`). */
  linkAddressOf(processId: string): Promise<string | null>;
  log: Pick<Logger, 'warn'>;
}

export class LinkPeers {
  constructor(private readonly deps: LinkPeersDeps) {}

  /** The process that serves `header`'s channel, when it is another live one with a link address. */
  async addressOf(header: LinkHeader): Promise<{ processId: string; host: string; port: number } | null> {
    const owner = header.channel === 'tunnel' ? tunnelSocketOwner(header.socket ?? '') : await this.deps.consumerOf(header.lease);
    if (owner === null || owner === this.deps.processId) return null;
    const address = await this.deps.linkAddressOf(owner);
    const split = address?.lastIndexOf(':') ?? -1;
    if (!address || split <= 0) return null;
    return { processId: owner, host: address.slice(0, split), port: Number(address.slice(split + 1)) };
  }

  /**
   * Passes `socket` (its header line read, `rest` what came after it) on to the process that
   * serves `header`'s channel; with `tlsPeer`, over TLS, the peer's certificate checked against
   * `tlsPeer.peerName` (the name every replica's certificate carries: Pod IPs come and go) or, when
   * null, the address it advertises. Resolves false, leaving the socket alone, when no other live
   * process does, the connection was passed on already, or the agent went meanwhile; true once it
   * is piped there. The peer has CONNECT_TIMEOUT_MS to accept (its TLS handshake included).
   */
  async forward(
    header: LinkHeader,
    rest: Buffer,
    socket: net.Socket,
    tlsPeer: { peerName: string | null } | null = null,
  ): Promise<boolean> {
    if (header.forwarded) return false;
    const peer = await this.addressOf(header);
    if (peer === null || socket.destroyed) return false;
    const tcp = net.connect({ host: peer.host, port: peer.port, allowHalfOpen: true });
    const upstream = tlsPeer ? tlsOver(tcp, tlsPeer.peerName ?? peer.host) : tcp;
    upstream.setNoDelay(true);
    tcp.setKeepAlive(true);
    socket.setKeepAlive(true);
    upstream.setTimeout(CONNECT_TIMEOUT_MS, () => upstream.destroy(new Error(`no answer in ${CONNECT_TIMEOUT_MS} ms`)));
    // A TLS socket says 'connect' once TCP is up; the peer has answered only after the handshake.
    upstream.once(tlsPeer ? 'secureConnect' : 'connect', () => upstream.setTimeout(0));
    upstream.write(`${JSON.stringify({ ...header, forwarded: true })}\n`);
    if (rest.length > 0) upstream.write(rest);
    // Half-open as the node relay is (net.Socket reads the flag when the agent's end arrives):
    // the agent's end of a transfer is passed on while the answer still comes back.
    socket.allowHalfOpen = true;
    spliceSockets(socket, upstream, (err, side) => {
      if (side === 'b')
        this.deps.log.warn({ err, sandboxId: header.lease, peer: peer.processId }, 'passing an agent link connection on failed');
    });
    socket.resume();
    return true;
  }
}
