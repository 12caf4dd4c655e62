/**
 * The control plane's end of agent tunnels (contract/previews.ts): a rendezvous where the
 * agent of a sandbox brings the connection the control plane asked for: a port preview's, or a
 * file transfer's (contract/transfers.ts), the byte channel that keeps bulk bytes off Redis.
 *
 * Each process listens, per lease it opened previews of, on its own Unix socket
 * `<lease dir>/<16 hex>.sock` (the lease dir is mounted into that lease's sandbox alone, mode
 * 0700, the socket 0600: only the agent, as root, reaches it; the tool user cannot). A connection
 * arriving there counts only if its first line names a connection this process is waiting for
 * *on that lease*: a sandbox cannot pick up another's connection, and ids are 128 random bits.
 * Several control-plane processes may serve one lease at once, each with its own socket, so a
 * preview works on whichever process the HTTP request reached. A listener with nothing pending
 * closes after LISTENER_IDLE_MS.
 *
 * Pooled connections (contract/previews.ts): the agent keeps up to PREVIEW_POOL_SIZE idle
 * connections to the socket, and an open hands one of them its port with a line on that
 * connection itself, with no control message (a Redis hop and the agent's wake-up fewer). An
 * idle connection counts only if its first line carries the listener's pool key (128 random
 * bits, sent to that lease's agent alone, new for every listener); more than PREVIEW_POOL_SIZE are
 * closed; all close with the listener (idle, or the lease's sandbox gone).
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import {
  PREVIEW_HEADER_MAX_BYTES,
  PREVIEW_POOL_SIZE,
  PreviewDialed,
  PreviewPoolHello,
  parseTunnelLine,
  type PreviewAssign,
  type PreviewOpen,
} from '../../contract/previews.js';
import type { TransferOp, TransferOpen } from '../../contract/transfers.js';
import { ConnIds } from './conn-ids.js';
import { tunnelSocketName } from './link-peers.js';
import { readLine } from './read-line.js';

/** A lease's listener with no connection pending for this long is closed, ms. */
const LISTENER_IDLE_MS = 60_000;
/** How long a tunnel connection has to send its first line, ms. */
const HEADER_TIMEOUT_MS = 5000;

export interface PreviewTunnelDeps {
  /** This process's id (`Liveness.processId`): it names the process's sockets (`tunnelSocketName`). */
  processId: string;
  /** Host directory of a lease's tunnel sockets (mounted into its sandbox at PREVIEW_SOCKET_DIR). */
  dirOf(leaseId: string): string;
  /** Delivers `message` to the lease's agent (its `control` channel). */
  signal(leaseId: string, message: PreviewOpen | TransferOpen): Promise<void>;
  log: Pick<Logger, 'warn'>;
  /** How long the agent has to bring a connection, ms (`SBX_PREVIEW_DIAL_TIMEOUT_MS`). */
  dialTimeoutMs: number;
}

/** The detail that marks an early open whose pooled connection closed before the agent answered. */
const CLOSED_BEFORE_ANSWER = 'closedBeforeAnswer';

/**
 * Whether `err` is an early open's pooled connection closing before the agent said anything (an
 * agent that restarted): nothing came back, so the request may go again on a connection asked
 * for, when it is one that can be sent twice (serve.ts).
 */
export function closedBeforeAnswer(err: unknown): boolean {
  return err instanceof AppError && err.code === 'preview.agent_unreachable' && err.details?.[CLOSED_BEFORE_ANSWER] === true;
}

/** An open preview connection: its socket carries the server's stream after the tunnel's own lines. */
export interface Tunnel {
  socket: net.Socket;
  /** Bytes of the agent's lines (counted in `socket.bytesRead`, not the server's). */
  headerBytes: number;
  /** Bytes of the control plane's lines (counted in `socket.bytesWritten`, not the client's). */
  headerBytesWritten: number;
}

/** A pipelined open (AgentTunnels.openEarly): the connection to write to now, and its tunnel once the agent answered. */
export interface EarlyTunnel {
  socket: net.Socket;
  answered: Promise<Tunnel>;
}

interface Pending {
  resolve(tunnel: Tunnel): void;
  reject(err: Error): void;
}

interface Listener {
  server: net.Server;
  socketName: string;
  /** What the agent's idle connections must say first (contract `PreviewPoolHello`). */
  poolKey: string;
  ready: Promise<void>;
  pending: Map<string, Pending>;
  /** Idle pooled connections, oldest first, and whether their agent takes early data. */
  pooled: Array<{ socket: net.Socket; early: boolean }>;
  idle: NodeJS.Timeout | null;
  /** Set by stop(): nothing more joins the pool. */
  closed: boolean;
}

export class AgentTunnels {
  private readonly listeners = new Map<string, Listener>();
  private readonly ids = new ConnIds();

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
    const { connId, arrived } = this.expect(leaseId, listener, port);
    const pooled = listener.pooled.shift();
    if (pooled) {
      this.assign(leaseId, listener, pooled.socket, connId, port, false);
      // An agent that never answers (paused, hung) leaves no half-used connection behind.
      arrived.catch(() => pooled.socket.destroy());
    } else await this.signal(leaseId, listener, connId, port);
    return arrived;
  }

  /**
   * A pipelined open (contract/previews.ts, early data): an idle pooled connection of an agent
   * that takes early data is assigned `port` and handed over at once, so the caller writes its
   * request without waiting for the agent; `answered` settles as `open` does (the agent's line
   * read, the server's stream next). The socket comes corked: the caller uncorks it once its
   * first bytes are written. Null when no such connection is idle (then `open`).
   */
  async openEarly(leaseId: string, port: number): Promise<EarlyTunnel | null> {
    const listener = this.listenerOf(leaseId);
    await listener.ready;
    // A connection that closed without its 'close' handled yet is no candidate.
    const at = listener.pooled.findIndex((p) => p.early && p.socket.writable && !p.socket.readableEnded);
    if (at < 0) return null;
    const socket = listener.pooled.splice(at, 1)[0]!.socket;
    const { connId, arrived } = this.expect(leaseId, listener, port);
    // Corked: the caller's first bytes join the assignment in one write (the caller uncorks).
    socket.cork();
    this.assign(leaseId, listener, socket, connId, port, true);
    arrived.catch(() => socket.destroy());
    return { socket, answered: arrived };
  }

  /**
   * A connection on which the sandbox's agent runs file transfer `op` (contract/transfers.ts),
   * resolved once its script started (the agent's `PreviewDialed` line read). Throws AppError
   * `files.agent_unreachable` (504: no connection within the dial timeout; an agent older than
   * transfers never brings one) and `files.transfer_failed` (the script could not start).
   */
  async openTransfer(leaseId: string, op: TransferOp): Promise<Tunnel> {
    const listener = this.listenerOf(leaseId);
    await listener.ready;
    const { connId, arrived } = this.expect(
      leaseId,
      listener,
      0,
      (timeoutMs) =>
        new AppError('files.agent_unreachable', `the sandbox's agent did not start the ${op.kind} within ${timeoutMs} ms`, {
          details: { timeoutMs },
        }),
    );
    const open: TransferOpen = { type: 'transfer_open', connId, socket: listener.socketName, op };
    await this.deps.signal(leaseId, open).catch((err: unknown) => listener.pending.get(connId)?.reject(err as Error));
    return arrived.catch((err: unknown) => {
      if (!(err instanceof AppError)) throw err;
      if (err.code === 'preview.upstream_failed')
        throw new AppError('files.transfer_failed', `the sandbox's agent could not start the ${op.kind}: ${String(err.details?.message)}`, {
          details: { reason: err.details?.message },
        });
      // The listener closed under it (this process stopping, the lease's sandbox gone).
      if (err.code === 'preview.agent_unreachable') throw new AppError('files.agent_unreachable', err.message);
      throw err;
    });
  }

  /**
   * A new connection id of `listener` and the tunnel it will be, failing after the dial timeout
   * with `unreachable(timeoutMs)` (default: preview.agent_unreachable naming `port`).
   */
  private expect(
    leaseId: string,
    listener: Listener,
    port: number,
    unreachable = (timeoutMs: number): AppError =>
      new AppError('preview.agent_unreachable', `the sandbox's agent did not open a connection to port ${port} within ${timeoutMs} ms`, {
        details: { port, timeoutMs },
      }),
  ): { connId: string; arrived: Promise<Tunnel> } {
    const connId = this.ids.next();
    const timeoutMs = this.deps.dialTimeoutMs;
    const arrived = new Promise<Tunnel>((resolve, reject) => {
      const timer = setTimeout(() => {
        listener.pending.delete(connId);
        this.touch(leaseId, listener);
        reject(unreachable(timeoutMs));
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
    return { connId, arrived };
  }

  /** Asks the agent over the control channel for connection `connId` (and a pool after it). */
  private async signal(leaseId: string, listener: Listener, connId: string, port: number): Promise<void> {
    try {
      await this.deps.signal(leaseId, {
        type: 'preview_open',
        connId,
        port,
        socket: listener.socketName,
        poolKey: listener.poolKey,
        early: true,
      });
    } catch (err) {
      listener.pending.get(connId)?.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /**
   * Hands idle pooled connection `socket` connection `connId`; its answer is read as a new
   * connection's. One that closes before answering (its agent restarted) falls back to a signal,
   * unless `early` (the caller may have written on it already): then the open fails as unreachable.
   */
  private assign(leaseId: string, listener: Listener, socket: net.Socket, connId: string, port: number, early: boolean): void {
    const fallBack = (): void => {
      if (!listener.pending.has(connId)) return;
      if (!early) void this.signal(leaseId, listener, connId, port);
      else
        listener.pending.get(connId)!.reject(
          new AppError('preview.agent_unreachable', 'the preview connection closed before the sandbox agent answered', {
            details: { port, [CLOSED_BEFORE_ANSWER]: true },
          }),
        );
    };
    socket.once('close', fallBack);
    const assign: PreviewAssign = early ? { id: connId, port, early: true } : { id: connId, port };
    const line = `${JSON.stringify(assign)}\n`;
    readLine(socket, PREVIEW_HEADER_MAX_BYTES, (answer, rest) => {
      socket.off('close', fallBack);
      this.dialed(socket, answer, rest, listener.pending, Buffer.byteLength(line));
    });
    socket.write(line);
  }

  /** Closes every listener of this process (pending opens fail as unreachable). */
  async close(): Promise<void> {
    await Promise.all([...this.listeners.keys()].map((id) => this.stop(id)));
  }

  /**
   * Takes a tunnel connection that came through the node relay (agent-link/link-listener.ts) as
   * one made to this process's socket `socketName` of `leaseId`; destroys it when this process has
   * no such listener.
   */
  adopt(leaseId: string, socketName: string | undefined, socket: net.Socket): void {
    const listener = this.listeners.get(leaseId);
    if (listener !== undefined && this.serves(leaseId, socketName)) this.accept(socket, listener);
    else socket.destroy();
  }

  /** Whether this process listens on socket `socketName` of `leaseId`. */
  serves(leaseId: string, socketName: string | undefined): boolean {
    const listener = this.listeners.get(leaseId);
    return listener !== undefined && !listener.closed && listener.socketName === socketName;
  }

  /** Closes this process's listener of `leaseId` (idempotent); open tunnels are left to their ends. */
  async stop(leaseId: string): Promise<void> {
    const listener = this.listeners.get(leaseId);
    if (!listener) return;
    this.listeners.delete(leaseId);
    listener.closed = true;
    if (listener.idle) clearTimeout(listener.idle);
    for (const p of listener.pending.values()) p.reject(new AppError('preview.agent_unreachable', 'the preview listener closed'));
    for (const { socket } of listener.pooled.splice(0)) socket.destroy();
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
    const socketName = tunnelSocketName(this.deps.processId);
    const pending = new Map<string, Pending>();
    const server = net.createServer((socket) => this.accept(socket, listener));
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
    const poolKey = randomBytes(16).toString('base64url');
    const listener: Listener = { server, socketName, poolKey, ready, pending, pooled: [], idle: null, closed: false };
    server.on('error', (err) => this.deps.log.warn({ err, sandboxId: leaseId }, 'preview tunnel listener error'));
    this.listeners.set(leaseId, listener);
    ready.catch(() => {
      if (this.listeners.get(leaseId) === listener) this.listeners.delete(leaseId);
    });
    return listener;
  }

  /** Reads a tunnel connection's first line: an idle pooled connection joins the pool, an answer goes to its open. */
  private accept(socket: net.Socket, listener: Listener): void {
    socket.on('error', () => socket.destroy());
    socket.setTimeout(HEADER_TIMEOUT_MS, () => socket.destroy());
    readLine(socket, PREVIEW_HEADER_MAX_BYTES, (line, rest) => {
      socket.setTimeout(0);
      const hello = PreviewPoolHello.safeParse(parseTunnelLine(line));
      if (!hello.success) {
        this.dialed(socket, line, rest, listener.pending);
        return;
      }
      if (hello.data.pool !== listener.poolKey || rest.length > 0 || listener.closed || listener.pooled.length >= PREVIEW_POOL_SIZE) {
        socket.destroy();
        return;
      }
      listener.pooled.push({ socket, early: hello.data.early === true });
      socket.once('close', () => {
        const at = listener.pooled.findIndex((p) => p.socket === socket);
        if (at >= 0) listener.pooled.splice(at, 1);
      });
    });
  }

  /**
   * Hands `socket` to the open its `PreviewDialed` line names (`rest`: bytes after the line), or
   * closes it. `linesWritten`: bytes of this process's own line on it (a pooled connection's assignment).
   */
  private dialed(socket: net.Socket, line: string, rest: Buffer, pending: Map<string, Pending>, linesWritten = 0): void {
    const dialed = PreviewDialed.safeParse(parseTunnelLine(line));
    const waiter = dialed.success ? pending.get(dialed.data.id) : undefined;
    if (!dialed.success || !waiter) {
      socket.destroy();
      return;
    }
    if (rest.length > 0) socket.unshift(rest);
    if (dialed.data.ok) {
      waiter.resolve({ socket, headerBytes: socket.bytesRead - rest.length, headerBytesWritten: linesWritten });
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
  }
}
