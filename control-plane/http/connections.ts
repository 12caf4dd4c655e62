/**
 * Connections that never sent a request are closed when the app closes. Node's `server.close()`
 * (and fastify's `forceCloseConnections: 'idle'`) closes idle keep-alive connections, but to Node a
 * connection that has not begun its first request is neither idle nor active: it stays open until
 * `headersTimeout` (60 s) and holds the close that long. HTTP clients open such spare connections
 * (undici does, the `e2b` SDK's client among them).
 */
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

export function installFreshConnectionClosing(app: FastifyInstance): void {
  const fresh = new Set<Socket>();
  app.addHook('onReady', async () => {
    app.server.on('connection', (socket: Socket) => {
      fresh.add(socket);
      socket.once('close', () => fresh.delete(socket));
    });
    // The API is plain HTTP (TLS ends in front of it): a request's socket is the connection's.
    app.server.prependListener('request', (request) => fresh.delete(request.socket));
    app.server.prependListener('upgrade', (request) => fresh.delete(request.socket));
  });
  app.addHook('preClose', async () => {
    for (const socket of fresh) socket.destroy();
  });
}
