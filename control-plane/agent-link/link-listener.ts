/**
 * The control plane's end of the node relay (contract/link.ts): a TCP listener that agents on
 * other machines reach through their node's relay. Each connection begins with a LinkHeader
 * line; its lease's link token is checked, then the rest of the connection is served exactly as
 * a connection to that lease's Unix socket on this host: the egress proxy (`egress`), or this
 * process's byte-tunnel socket (`tunnel`). A connection whose channel another replica serves is
 * passed on to it (link-peers.ts). A bad, late or oversized header, a wrong token, or a lease or
 * socket no live process serves closes the connection with nothing written.
 */
import { hkdfSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import type { Logger } from 'pino';
import { LINK_HEADER_MAX_BYTES, LinkHeader, validLinkToken } from '../../contract/link.js';
import type { LinkPeers } from './link-peers.js';
import { readLine } from './read-line.js';

/**
 * How long a connection has for its TLS handshake (the TLS server's own timeout), and then again,
 * from the handshake's end, for its header and finding the replica it goes to, ms: deadlines, not
 * idle timers, so a byte now and then does not hold it.
 */
const HEADER_TIMEOUT_MS = 10_000;
/** Connections one listener holds at most (each a sandbox's egress connection or tunnel). */
const MAX_CONNECTIONS = 8192;

export interface LinkListenerDeps {
  /** The link tokens' key (shared by every control plane of the installation). */
  key: Buffer;
  egress: { serves(leaseId: string): boolean; adopt(leaseId: string, socket: net.Socket): void };
  tunnels: {
    serves(leaseId: string, socketName: string | undefined): boolean;
    adopt(leaseId: string, socketName: string | undefined, socket: net.Socket): void;
  };
  /**
   * PEM files of the certificate and key it serves TLS with (`SBX_LINK_TLS_CERT`, `SBX_LINK_TLS_KEY`),
   * and the name the other replicas' certificates are checked against (`SBX_LINK_TLS_PEER_NAME`;
   * null: their advertised addresses); null: plain TCP.
   */
  tls: { certFile: string; keyFile: string; peerName: string | null } | null;
  /** The other replicas, to pass on what this process does not serve. */
  peers: Pick<LinkPeers, 'forward'>;
  log: Pick<Logger, 'warn'>;
}

export class LinkListener {
  private readonly server: net.Server;

  constructor(private readonly deps: LinkListenerDeps) {
    const accept = (socket: net.Socket): void => this.accept(socket);
    this.server = deps.tls
      ? tls.createServer(
          { cert: readFileSync(deps.tls.certFile), key: readFileSync(deps.tls.keyFile), handshakeTimeout: HEADER_TIMEOUT_MS },
          accept,
        )
      : net.createServer(accept);
    this.server.maxConnections = MAX_CONNECTIONS;
    // A TLS handshake that fails (a plaintext client, a wrong CA) ends that connection only.
    this.server.on('tlsClientError', (err: Error) =>
      deps.log.warn({ err: err.message }, 'agent link connection refused: TLS handshake failed'),
    );
    this.server.on('error', (err) => deps.log.warn({ err }, 'agent link listener error'));
  }

  /** Listens on `host`:`port` (0: any free port); resolves with the port. */
  async listen(host: string, port: number): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Stops listening; connections already handed over stay with their owners. */
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(socket: net.Socket): void {
    socket.on('error', () => socket.destroy());
    socket.setNoDelay(true);
    // From the handshake's end (or the TCP accept, without TLS).
    const deadline = setTimeout(() => socket.destroy(), HEADER_TIMEOUT_MS);
    socket.once('close', () => clearTimeout(deadline));
    readLine(socket, LINK_HEADER_MAX_BYTES, (line, rest) => {
      const header = LinkHeader.safeParse(parseJson(line));
      if (!header.success || !validLinkToken(this.deps.key, header.data.lease, header.data.token)) {
        this.deps.log.warn({ lease: header.success ? header.data.lease : null }, 'agent link connection refused: bad header or token');
        socket.destroy();
        return;
      }
      const { lease, channel, socket: socketName } = header.data;
      const { egress, tunnels } = this.deps;
      if (channel === 'egress' ? egress.serves(lease) : tunnels.serves(lease, socketName)) {
        clearTimeout(deadline);
        if (rest.length > 0) socket.unshift(rest);
        if (channel === 'egress') egress.adopt(lease, socket);
        else tunnels.adopt(lease, socketName, socket);
        return;
      }
      void this.deps.peers.forward(header.data, rest, socket, this.deps.tls).then(
        (passed) => (passed ? clearTimeout(deadline) : socket.destroy()),
        (err: unknown) => {
          this.deps.log.warn({ err, lease }, 'agent link connection dropped: finding the replica that serves it failed');
          socket.destroy();
        },
      );
    });
  }
}

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line) as unknown;
  } catch {
    return null;
  }
}

/** The link tokens' key, derived from the secrets key every control plane of an installation shares. */
export function agentLinkKey(secretsKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', secretsKey, Buffer.alloc(0), 'sbx agent link', 32));
}

/** A link listener on `address`, listening; null when there is no address (`SBX_LINK_LISTEN` unset). */
export async function startLinkListener(
  address: { host: string; port: number } | null,
  deps: LinkListenerDeps,
): Promise<LinkListener | null> {
  if (address === null) return null;
  const listener = new LinkListener(deps);
  await listener.listen(address.host, address.port);
  return listener;
}
