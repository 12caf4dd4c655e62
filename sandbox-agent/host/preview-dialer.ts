/**
 * Port previews, the sandbox's side (contract/previews.ts): for each `PreviewOpen` the control
 * plane sends, and for each `PreviewAssign` on an idle pooled connection, connect to the server
 * on 127.0.0.1:`port` (then [::1], for servers bound to `localhost` on IPv6 only), say how that
 * went in one `PreviewDialed` line on the tunnel, and pipe bytes both ways until either side
 * closes. After a `PreviewOpen` the agent keeps PREVIEW_POOL_SIZE idle connections to its
 * socket, so that later connections need no control message; they take early data (the
 * client's bytes right behind the assignment, held until the server answered) when the open
 * said the control plane sends it. The agent decides
 * nothing about who may preview what (the control plane checked the policy); it only refuses
 * ports it serves itself (the egress forwarder), which no preview may reach.
 */
import net from 'node:net';
import { basename, join } from 'node:path';
import type { Logger } from 'pino';
import {
  PREVIEW_HEADER_MAX_BYTES,
  PREVIEW_POOL_SIZE,
  PREVIEW_SOCKET_DIR,
  PreviewAssign,
  parseTunnelLine,
  type PreviewDialed,
  type PreviewOpen,
  type PreviewPoolHello,
} from '../../contract/previews.js';
import { dialChannel, type LinkRoute } from './link-dial.js';

/** How long the tunnel may stay open after the server closed cleanly (its last bytes flushing), ms. */
const LINGER_MS = 30_000;
/**
 * How long an early connection's answer line may wait for the server's first bytes to travel
 * with, ms: long enough for a quick answer, far below the control plane's dial timeout.
 */
const ANSWER_COALESCE_MS = 20;
/**
 * What a side of the pipe may hold before the other is paused, bytes: a socket read is up to
 * 64 KiB, and with the default 16 KiB every chunk would pause and resume the reading side.
 * Each stalled connection may hold this much of the sandbox's memory, so no more than four reads.
 */
const PIPE_HIGH_WATER_MARK_BYTES = 256 * 1024;
/** How long connecting to the server in the sandbox may take, ms. */
const LOCAL_CONNECT_TIMEOUT_MS = 5000;

export interface PreviewDialerOptions {
  /** Loopback ports the agent itself listens on: refused as `reserved`. */
  reservedPorts: ReadonlySet<number>;
  /** Directory of the tunnel sockets. Default PREVIEW_SOCKET_DIR. */
  socketDir?: string;
  /** The lease and its node relay link, if any (link-dial.ts). */
  route: LinkRoute;
  log: Pick<Logger, 'warn'>;
}

/** The idle pooled connections of one tunnel socket: how many, under which key. */
interface Pool {
  key: string;
  idle: number;
  /** Whether the control plane takes early data on this socket (its open said so). */
  early: boolean;
}

/** Per tunnel socket path. A pool whose connections all closed unassigned is forgotten. */
const pools = new Map<string, Pool>();

/**
 * Opens one preview connection and fills the socket's pool of idle connections; never throws
 * (failures are reported on the tunnel, or logged).
 */
export function dialPreview(open: PreviewOpen, options: PreviewDialerOptions): void {
  const path = join(options.socketDir ?? PREVIEW_SOCKET_DIR, open.socket);
  const tunnel = connectPiped({ path }, options.route);
  void answer(tunnel, open.connId, open.port, options).catch((err: unknown) =>
    options.log.warn({ err, port: open.port }, 'preview connection failed'),
  );
  let pool = pools.get(path);
  if (pool?.key !== open.poolKey) {
    pool = { key: open.poolKey, idle: 0, early: open.early === true };
    pools.set(path, pool);
  }
  while (pool.idle < PREVIEW_POOL_SIZE) openIdle(path, pool, options);
}

/** One idle pooled connection: waits for its `PreviewAssign`, then answers it and is replaced. */
function openIdle(path: string, pool: Pool, options: PreviewDialerOptions): void {
  pool.idle += 1;
  let assigned = false;
  const tunnel = connectPiped({ path }, options.route);
  tunnel.on('error', () => tunnel.destroy());
  const hello: PreviewPoolHello = pool.early ? { pool: pool.key, early: true } : { pool: pool.key };
  tunnel.write(`${JSON.stringify(hello)}\n`);
  let buffered: Buffer = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    const end = buffered.indexOf(0x0a);
    if (end < 0) {
      if (buffered.length >= PREVIEW_HEADER_MAX_BYTES) tunnel.destroy();
      return;
    }
    tunnel.off('data', onData);
    tunnel.pause();
    const assign = PreviewAssign.safeParse(parseTunnelLine(buffered.subarray(0, end).toString('utf8')));
    const rest = buffered.subarray(end + 1);
    // Bytes behind the line are the client's early data, only when the line said so.
    if (!assign.success || (rest.length > 0 && assign.data.early !== true)) {
      tunnel.destroy();
      return;
    }
    // Held in the tunnel (paused) until the server answered: answer() pipes them to it first.
    if (rest.length > 0) tunnel.unshift(rest);
    assigned = true;
    pool.idle -= 1;
    void answer(tunnel, assign.data.id, assign.data.port, options, assign.data.early === true).catch((err: unknown) =>
      options.log.warn({ err, port: assign.data.port }, 'preview connection failed'),
    );
    // Replaced after the connection to the server began: the request waits for no pool upkeep.
    setImmediate(() => {
      if (pools.get(path) === pool) openIdle(path, pool, options);
    });
  };
  tunnel.on('data', onData);
  tunnel.once('close', () => {
    if (assigned) return;
    pool.idle -= 1;
    if (pool.idle === 0 && pools.get(path) === pool) pools.delete(path);
  });
}

/**
 * Connects to the server on `port`, writes how that went as the `PreviewDialed` line of `id` on
 * `tunnel`, then pipes bytes both ways (or ends the tunnel when the server could not be reached).
 * `earlyData` (the control plane's request already came behind the assignment, so it waits for
 * nothing but the answer): a success line leaves with the server's first bytes, in one write and
 * one wake-up of the control plane, or after ANSWER_COALESCE_MS when the server is slower.
 */
async function answer(tunnel: net.Socket, id: string, port: number, options: PreviewDialerOptions, earlyData = false): Promise<void> {
  let local: net.Socket | null = null;
  let dialed: PreviewDialed;
  // Until the pipes below own the tunnel, its failure only ends the local side.
  const early = (): void => {
    local?.destroy();
  };
  tunnel.on('error', early);
  if (options.reservedPorts.has(port)) {
    dialed = { id, ok: false, code: 'reserved', message: `port ${port} is served by the sandbox agent` };
  } else {
    try {
      local = await connectLocal(port);
      dialed = { id, ok: true };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      dialed = {
        id,
        ok: false,
        code: code === 'ECONNREFUSED' ? 'refused' : 'failed',
        message: (code ?? (err as Error).message).slice(0, 300),
      };
    }
  }
  if (tunnel.destroyed) {
    local?.destroy();
    return;
  }
  if (earlyData && local) holdUntilServerSpeaks(tunnel, local);
  tunnel.write(`${JSON.stringify(dialed)}\n`);
  if (!local) {
    // Early bytes held for the server are dropped (read to nothing), so the control plane's end
    // is seen and the connection closes; held unread, it would stay open.
    tunnel.end();
    tunnel.resume();
    return;
  }
  const server = local;
  tunnel.off('error', early);
  tunnel.on('error', () => server.destroy());
  server.on('error', () => tunnel.destroy());
  // Each side's end is passed on by the pipes, after what is buffered: a server that closes
  // right after its last bytes loses none of them. An error cuts the other side at once.
  server.pipe(tunnel);
  tunnel.pipe(server);
  tunnel.resume();
  let linger: NodeJS.Timeout | undefined;
  server.once('close', (hadError) => {
    if (hadError) tunnel.destroy();
    // A tunnel already gone (the control plane ends it after each response) has nothing to flush.
    else if (!tunnel.destroyed) linger = setTimeout(() => tunnel.destroy(), LINGER_MS).unref();
  });
  // The linger timer goes with the tunnel: held for LINGER_MS, it would keep every closed tunnel in memory that long.
  tunnel.once('close', () => {
    clearTimeout(linger);
    server.destroy();
  });
}

/**
 * Corks `tunnel` until `server` sent its first bytes, ended or closed, or ANSWER_COALESCE_MS
 * passed, whichever comes first: what was written meanwhile (the answer line, then the first
 * bytes piped from the server) leaves in one write.
 */
function holdUntilServerSpeaks(tunnel: net.Socket, server: net.Socket): void {
  tunnel.cork();
  let held = true;
  const release = (): void => {
    if (!held) return;
    held = false;
    clearTimeout(timer);
    server.off('data', onFirst);
    server.off('end', release);
    server.off('close', release);
    // After the pipe's own 'data' listener wrote the chunk: the line and the chunk go together.
    process.nextTick(() => tunnel.uncork());
  };
  const onFirst = (): void => release();
  const timer = setTimeout(release, ANSWER_COALESCE_MS);
  server.on('data', onFirst);
  server.once('end', release);
  server.once('close', release);
}

/**
 * net.connect with PIPE_HIGH_WATER_MARK_BYTES for writing: Node hands the option to the
 * socket's stream (Duplex), which @types/node does not declare for connect. With `route`, a tunnel
 * socket of the control plane (through the node relay where there is one); without, the server in the sandbox.
 */
function connectPiped(options: net.NetConnectOpts, route?: LinkRoute): net.Socket {
  const piped: net.NetConnectOpts & { writableHighWaterMark: number } = { ...options, writableHighWaterMark: PIPE_HIGH_WATER_MARK_BYTES };
  if (route === undefined || !('path' in piped) || piped.path === undefined) return net.connect(piped);
  return dialChannel({ ...piped, path: piped.path }, route, { channel: 'tunnel', socket: basename(piped.path) });
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
    const socket = connectPiped({ host, port });
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
