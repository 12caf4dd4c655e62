/**
 * Upgrade requests (WebSocket) through fastify's router. Node hands a request with `Upgrade`
 * to the server's 'upgrade' listeners with its socket detached from the HTTP parser (the only
 * way to pipe raw bytes after it); without a listener it would be parsed on as plain HTTP. The
 * dispatcher here routes such a request like any other (auth, lease guard, handler), with a
 * response bound to its socket for the error answers, and closes the socket after one
 * (`endAnsweredUpgrades` does that for every listener's upgrades, from the app's root).
 *
 * Installed only when nothing else listens for upgrades: @fastify/websocket routes upgrades
 * through fastify the same way (its `kWs`/`kWsHead` symbols); the preview routes must then be
 * registered before it, so its route wrapper does not take their upgrades, and `upgradeHead`
 * finds the head under its symbol.
 */
import { ServerResponse, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';

const kHead = Symbol('sbx-upgrade-head');

/** The bytes that came after an upgrade request's head (usually none). */
export function upgradeHead(req: IncomingMessage): Buffer {
  const own = (req as unknown as Record<symbol, unknown>)[kHead];
  if (Buffer.isBuffer(own)) return own;
  for (const sym of Object.getOwnPropertySymbols(req)) {
    const value = (req as unknown as Record<symbol, unknown>)[sym];
    if (sym.description === 'ws-head' && Buffer.isBuffer(value)) return value;
  }
  return Buffer.alloc(0);
}

/** Routes upgrade requests of `app`'s server through fastify, unless another listener does. */
export function installUpgradeDispatch(app: FastifyInstance): void {
  app.addHook('onReady', async () => {
    const server = app.server;
    if (server.listenerCount('upgrade') > 0) return;
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => socket.destroy());
      (req as unknown as Record<symbol, unknown>)[kHead] = head;
      const res = new ServerResponse(req);
      res.assignSocket(socket as never);
      // An answer that is not a handover (an error, a redirect) ends the connection.
      res.once('finish', () => socket.end());
      app.routing(req, res);
    });
  });
}

/**
 * Ends the connection of every upgrade request answered over HTTP (a refusal: no API key, a bad
 * signed token, a missing terminal), whichever 'upgrade' listener routed it. Its socket was
 * detached from Node's HTTP parser, so nothing else reads or closes it: left open, it would live
 * as long as the client keeps it, and hold the server's close. A handover (hijack) has no
 * `onResponse`, so a socket that was upgraded is never touched.
 */
export function endAnsweredUpgrades(app: FastifyInstance): void {
  app.addHook('onResponse', async (request) => {
    if ((request.raw as IncomingMessage & { upgrade?: boolean }).upgrade === true) request.raw.socket.end();
  });
}
