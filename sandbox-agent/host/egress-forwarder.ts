/**
 * Inside a sandbox with network mode `allowlist`: the loopback listener tools reach as their
 * HTTP(S) proxy (`HTTP_PROXY=http://127.0.0.1:<port>`). It decides nothing: every byte goes to
 * the control plane's egress proxy through the Unix socket mounted from the host, which checks
 * the allowlist. The sandbox has no other way out (no interface but loopback), so a tool that
 * ignores the proxy variables simply has no network.
 */
import net from 'node:net';
import { dialChannel, type LinkRoute } from './link-dial.js';

/**
 * Listens on 127.0.0.1:`port` and pipes each connection to `socketPath` (or through the node
 * relay, `route`). Resolves once listening; rejects with the listen error (e.g. EADDRINUSE).
 */
export async function startEgressForwarder(port: number, socketPath: string, route: LinkRoute): Promise<net.Server> {
  const server = net.createServer((client) => {
    // A relay of small writes both ways (TLS handshakes): Nagle's wait for an ACK the peer delays
    // would cost about 40 ms per exchange.
    client.setNoDelay(true);
    const upstream = dialChannel({ path: socketPath }, route, { channel: 'egress' });
    client.pipe(upstream);
    upstream.pipe(client);
    client.once('error', () => upstream.destroy());
    upstream.once('error', () => client.destroy());
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
