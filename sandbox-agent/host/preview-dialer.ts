/**
 * Port previews, the sandbox's side (contract/previews.ts): for each `PreviewOpen` the control
 * plane sends, connect to the server on 127.0.0.1:`port` (then [::1], for servers bound to
 * `localhost` on IPv6 only), connect to the named tunnel socket, say how the first went in one
 * `PreviewDialed` line, and pipe bytes both ways until either side closes. The agent decides
 * nothing about who may preview what (the control plane checked the policy); it only refuses
 * ports it serves itself (the egress forwarder), which no preview may reach.
 */
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { PREVIEW_SOCKET_DIR, type PreviewDialed, type PreviewOpen } from '../../contract/previews.js';

/** How long the tunnel may stay open after the server closed cleanly (its last bytes flushing), ms. */
const LINGER_MS = 30_000;
/** How long connecting to the server in the sandbox may take, ms. */
const LOCAL_CONNECT_TIMEOUT_MS = 5000;

export interface PreviewDialerOptions {
  /** Loopback ports the agent itself listens on: refused as `reserved`. */
  reservedPorts: ReadonlySet<number>;
  /** Directory of the tunnel sockets. Default PREVIEW_SOCKET_DIR. */
  socketDir?: string;
  log: Pick<Logger, 'warn'>;
}

/** Opens one preview connection; never throws (failures are reported on the tunnel, or logged). */
export function dialPreview(open: PreviewOpen, options: PreviewDialerOptions): void {
  void dial(open, options).catch((err: unknown) => options.log.warn({ err, port: open.port }, 'preview connection failed'));
}

async function dial(open: PreviewOpen, options: PreviewDialerOptions): Promise<void> {
  let local: net.Socket | null = null;
  let dialed: PreviewDialed;
  if (options.reservedPorts.has(open.port)) {
    dialed = { id: open.connId, ok: false, code: 'reserved', message: `port ${open.port} is served by the sandbox agent` };
  } else {
    try {
      local = await connectLocal(open.port);
      dialed = { id: open.connId, ok: true };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      dialed = {
        id: open.connId,
        ok: false,
        code: code === 'ECONNREFUSED' ? 'refused' : 'failed',
        message: (code ?? (err as Error).message).slice(0, 300),
      };
    }
  }
  const tunnel = net.connect(join(options.socketDir ?? PREVIEW_SOCKET_DIR, open.socket));
  tunnel.on('error', () => local?.destroy());
  tunnel.write(`${JSON.stringify(dialed)}\n`);
  if (!local) {
    tunnel.end();
    return;
  }
  const server = local;
  server.on('error', () => tunnel.destroy());
  // Each side's end is passed on by the pipes, after what is buffered: a server that closes
  // right after its last bytes loses none of them. An error cuts the other side at once.
  server.pipe(tunnel);
  tunnel.pipe(server);
  server.once('close', (hadError) => {
    if (hadError) tunnel.destroy();
    else setTimeout(() => tunnel.destroy(), LINGER_MS).unref();
  });
  tunnel.once('close', () => server.destroy());
}

/** Connects to `port` on 127.0.0.1, else on ::1; rejects with the IPv4 error when neither answers. */
async function connectLocal(port: number): Promise<net.Socket> {
  try {
    return await connectTo('127.0.0.1', port);
  } catch (first) {
    try {
      return await connectTo('::1', port);
    } catch {
      throw first;
    }
  }
}

function connectTo(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    socket.setNoDelay(true);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' }));
    }, LOCAL_CONNECT_TIMEOUT_MS);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    });
  });
}
