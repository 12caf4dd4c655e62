/**
 * The control plane's end of preview tunnels (contract/previews.ts): a rendezvous where the
 * agent of a sandbox brings the connection the control plane asked for.
 *
 * Each process listens, per lease it opened previews of, on its own Unix socket
 * `<lease dir>/<16 hex>.sock` (the lease dir is mounted into that lease's sandbox alone, mode
 * 0700, the socket 0600: only the agent, as root, reaches it; the tool user cannot). A connection
 * arriving there counts only if its first line names a connection this process is waiting for
 * *on that lease*: a sandbox cannot pick up another's connection, and ids are 128 random bits.
 * Several control-plane processes may serve one lease at once, each with its own socket, so a
 * preview works on whichever process the HTTP request reached. A listener with nothing pending
 * closes after LISTENER_IDLE_MS.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import { PREVIEW_HEADER_MAX_BYTES, PreviewDialed, type PreviewOpen } from '../../contract/previews.js';

/** How long the agent has to bring a connection, ms. */
const DEFAULT_DIAL_TIMEOUT_MS = 10_000;
/** A lease's listener with no connection pending for this long is closed, ms. */
const LISTENER_IDLE_MS = 60_000;
/** How long a tunnel connection has to send its first line, ms. */
const HEADER_TIMEOUT_MS = 5000;

export interface PreviewTunnelDeps {
  /** Host directory of a lease's tunnel sockets (mounted into its sandbox at PREVIEW_SOCKET_DIR). */
  dirOf(leaseId: string): string;
  /** Delivers `message` to the lease's agent (its `control` channel). */
  signal(leaseId: string, message: PreviewOpen): Promise<void>;
  log: Pick<Logger, 'warn'>;
  /** How long the agent has to bring a connection, ms. Default 10 000. */
  dialTimeoutMs?: number;
}

/** An open preview connection: its socket carries the server's stream; `headerBytes` were the agent's first line. */
export interface Tunnel {
  socket: net.Socket;
  /** Bytes of the agent's first line (counted in `socket.bytesRead`, not the server's). */
  headerBytes: number;
}

interface Pending {
  resolve(tunnel: Tunnel): void;
  reject(err: Error): void;
}

interface Listener {
  server: net.Server;
  socketName: string;
  ready: Promise<void>;
  pending: Map<string, Pending>;
  idle: NodeJS.Timeout | null;
}

export class PreviewTunnels {
  /** Names this process's sockets: one per process, so peers never take each other's path. */
  private readonly instance = randomBytes(8).toString('hex');
  private readonly listeners = new Map<string, Listener>();

  constructor(private readonly deps: PreviewTunnelDeps) {}

  /**
   * A connection to 127.0.0.1:`port` inside the sandbox of `leaseId`: a socket whose bytes are
   * the server's stream (paused; the caller reads). Throws AppError `preview.port_closed` (502: nothing listens there),
   * `preview.port_denied` (403: a port the agent serves itself), `preview.upstream_failed` (502:
   * any other failure to connect) and `preview.agent_unreachable` (504: the agent brought nothing
   * in time: gone, paused, or older than previews).
   */
  async open(leaseId: string, port: number): Promise<Tunnel> {
    const listener = this.listenerOf(leaseId);
    await listener.ready;
    const connId = randomBytes(16).toString('base64url');
    const timeoutMs = this.deps.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    const arrived = new Promise<Tunnel>((resolve, reject) => {
      const timer = setTimeout(() => {
        listener.pending.delete(connId);
        this.touch(leaseId, listener);
        reject(
          new AppError(
            'preview.agent_unreachable',
            `the sandbox's agent did not open a connection to port ${port} within ${timeoutMs} ms`,
            {
              details: { port, timeoutMs },
            },
          ),
        );
      }, timeoutMs);
      const settle = (): void => {
        clearTimeout(timer);
        listener.pending.delete(connId);
        this.touch(leaseId, listener);
      };
      listener.pending.set(connId, {
        resolve: (tunnel) => {
          settle();
          resolve(tunnel);
        },
        reject: (err) => {
          settle();
          reject(err);
        },
      });
    });
    if (listener.idle) clearTimeout(listener.idle);
    listener.idle = null;
    try {
      await this.deps.signal(leaseId, { type: 'preview_open', connId, port, socket: listener.socketName });
    } catch (err) {
      listener.pending.get(connId)?.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return arrived;
  }

  /** Closes every listener of this process (pending opens fail as unreachable). */
  async close(): Promise<void> {
    await Promise.all([...this.listeners.keys()].map((id) => this.stop(id)));
  }

  /** Closes this process's listener of `leaseId` (idempotent); open tunnels are left to their ends. */
  async stop(leaseId: string): Promise<void> {
    const listener = this.listeners.get(leaseId);
    if (!listener) return;
    this.listeners.delete(leaseId);
    if (listener.idle) clearTimeout(listener.idle);
    for (const p of listener.pending.values()) p.reject(new AppError('preview.agent_unreachable', 'the preview listener closed'));
    await new Promise<void>((resolve) => listener.server.close(() => resolve()));
    await rm(join(this.deps.dirOf(leaseId), listener.socketName), { force: true }).catch(() => undefined);
  }

  /** Starts the idle clock of a listener with nothing pending. */
  private touch(leaseId: string, listener: Listener): void {
    if (listener.pending.size > 0 || listener.idle) return;
    listener.idle = setTimeout(() => void this.stop(leaseId), LISTENER_IDLE_MS);
    listener.idle.unref();
  }

  private listenerOf(leaseId: string): Listener {
    const existing = this.listeners.get(leaseId);
    if (existing) return existing;
    const socketName = `${this.instance}.sock`;
    const pending = new Map<string, Pending>();
    const server = net.createServer((socket) => this.accept(socket, pending));
    const dir = this.deps.dirOf(leaseId);
    const path = join(dir, socketName);
    const ready = (async () => {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await rm(path, { force: true });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(path, () => {
          server.off('error', reject);
          resolve();
        });
      });
      await chmod(path, 0o600);
    })();
    const listener: Listener = { server, socketName, ready, pending, idle: null };
    server.on('error', (err) => this.deps.log.warn({ err, sandboxId: leaseId }, 'preview tunnel listener error'));
    this.listeners.set(leaseId, listener);
    ready.catch(() => {
      if (this.listeners.get(leaseId) === listener) this.listeners.delete(leaseId);
    });
    return listener;
  }

  /** Reads a tunnel connection's first line and hands the socket to the open it names. */
  private accept(socket: net.Socket, pending: Map<string, Pending>): void {
    socket.on('error', () => socket.destroy());
    socket.setTimeout(HEADER_TIMEOUT_MS, () => socket.destroy());
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf(0x0a);
      if (end < 0) {
        if (buffered.length >= PREVIEW_HEADER_MAX_BYTES) socket.destroy();
        return;
      }
      socket.off('data', onData);
      socket.pause();
      socket.setTimeout(0);
      const dialed = PreviewDialed.safeParse(safeJson(buffered.subarray(0, end).toString('utf8')));
      const waiter = dialed.success ? pending.get(dialed.data.id) : undefined;
      if (!dialed.success || !waiter) {
        socket.destroy();
        return;
      }
      const rest = buffered.subarray(end + 1);
      if (rest.length > 0) socket.unshift(rest);
      if (dialed.data.ok) {
        socket.setNoDelay(true);
        waiter.resolve({ socket, headerBytes: end + 1 });
        return;
      }
      socket.destroy();
      const { code, message } = dialed.data;
      waiter.reject(
        code === 'refused'
          ? new AppError('preview.port_closed', 'nothing listens on this port in the sandbox (connection refused)', {
              details: { message },
            })
          : code === 'reserved'
            ? new AppError('preview.port_denied', 'this port is served by the sandbox agent and is never exposed', { details: { message } })
            : new AppError('preview.upstream_failed', `connecting to the port in the sandbox failed: ${message}`, { details: { message } }),
      );
    };
    socket.on('data', onData);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
