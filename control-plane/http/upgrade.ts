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

/** The tracking listeners (installUpgradeSocketTracking): they route nothing, so they do not count as a dispatcher. */
const trackers = new WeakSet<object>();

/** Routes upgrade requests of `app`'s server through fastify, unless another listener does. */
export function installUpgradeDispatch(app: FastifyInstance): void {
  app.addHook('onReady', async () => {
    const server = app.server;
    if (server.listeners('upgrade').some((listener) => !trackers.has(listener))) return;
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

/** How long shutdown leaves upgraded sockets to finish their own close (a WebSocket's close handshake), ms. */
export const UPGRADE_CLOSE_GRACE_MS = 2000;

/**
 * Every socket Node detached for an upgrade is this app's to close: the HTTP server no longer
 * manages it, yet `server.close()` waits for it. Installed on the root instance before any route:
 * a refused upgrade (an error answer, not a handover) ends its socket once the answer is written,
 * and at shutdown whatever is still open (attached terminals, previews, a peer that never closed)
 * is destroyed `UPGRADE_CLOSE_GRACE_MS` after close began.
 */
export function installUpgradeSocketTracking(app: FastifyInstance): void {
  const sockets = new Set<Duplex>();
  let grace: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    const track = (_req: IncomingMessage, socket: Duplex): void => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    };
    trackers.add(track);
    app.server.prependListener('upgrade', track);
  });
  app.addHook('onResponse', async (request) => {
    // Reached only by an answer fastify wrote (a handover hijacks the reply, which skips this).
    if ((request.raw as IncomingMessage & { upgrade?: boolean }).upgrade === true) request.raw.socket.end();
  });
  app.addHook('preClose', async () => {
    grace = setTimeout(() => {
      for (const socket of sockets) socket.destroy();
    }, UPGRADE_CLOSE_GRACE_MS);
  });
  app.addHook('onClose', async () => {
    clearTimeout(grace);
    for (const socket of sockets) socket.destroy();
  });
}
