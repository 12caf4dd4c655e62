/**
 * Byte pipes between two sockets, as the node relay (node-relay/main.ts) and a control-plane
 * replica passing an agent's link connection on (control-plane/agent-link/link-peers.ts) use them.
 * No dependency but node: the node relay runs with nothing else.
 */
import net from 'node:net';
import tls from 'node:tls';

/**
 * TLS over `socket` (a TCP connection, half-open allowed), the server's certificate checked against
 * `name` (a DNS name, sent as SNI, or an address, which SNI cannot carry).
 */
export function tlsOver(socket: net.Socket, name: string): tls.TLSSocket {
  return tls.connect({
    socket,
    servername: net.isIP(name) ? undefined : name,
    checkServerIdentity: (_host, cert) => tls.checkServerIdentity(name, cert),
  });
}

/**
 * Pipes `a` and `b` into each other, half-open both ways: a side that ends its writing (a
 * transfer's sender, done) may still be read from (the receiver's end frame comes back); each end
 * is passed on after what is buffered. An error on either side cuts both; `onError` hears of it.
 * A side that closes without an error (destroyed, or both its directions done) ends the other's
 * writing, which then closes once its peer has ended too; a side closed already ends the other at once.
 * Both sockets must allow half-open connections (`allowHalfOpen: true`) for the ends to pass.
 */
export function spliceSockets(a: net.Socket, b: net.Socket, onError: (err: Error, side: 'a' | 'b') => void = () => undefined): void {
  a.pipe(b);
  b.pipe(a);
  a.on('error', (err) => {
    onError(err, 'a');
    b.destroy();
  });
  b.on('error', (err) => {
    onError(err, 'b');
    a.destroy();
  });
  const passClose = (to: net.Socket) => (hadError: boolean) => {
    if (hadError) to.destroy();
    else if (!to.writableEnded) to.end();
  };
  for (const [from, to] of [
    [a, b],
    [b, a],
  ] as const) {
    if (from.destroyed) passClose(to)(false);
    else from.once('close', passClose(to));
  }
}
