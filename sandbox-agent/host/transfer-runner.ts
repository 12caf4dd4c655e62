/**
 * File transfers, the sandbox's side (contract/transfers.ts): for each `TransferOpen` the
 * control plane sends, connect to the tunnel socket, start the op's script as the tool user and
 * carry its bytes: the tunnel is its stdin (`unpack`), its stdout goes onto the tunnel in DATA
 * frames (`pack`); then one END frame with how it exited. The agent decides nothing about which
 * paths may be transferred (the control plane checked the policy; the scripts check where each
 * path resolves inside the sandbox); it only runs them as the tool user, never as itself.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { PREVIEW_SOCKET_DIR, type PreviewDialed } from '../../contract/previews.js';
import {
  TRANSFER_FRAME,
  TRANSFER_FRAME_HEADER_BYTES,
  TRANSFER_PATH,
  TRANSFER_SHELL,
  TRANSFER_STDERR_MAX_BYTES,
  transferArgv,
  type TransferEnd,
  type TransferOpen,
} from '../../contract/transfers.js';

/**
 * What the tunnel may hold before the script's stdout is paused, bytes: a pipe read is up to
 * 64 KiB, so a few reads in flight, no more (each transfer holds this much of the sandbox's memory).
 */
const TUNNEL_HIGH_WATER_MARK_BYTES = 256 * 1024;

export interface TransferRunnerOptions {
  /** Who the scripts run as: the lease's tool user (the agent's config). */
  toolUser: { uid: number; gid: number };
  /** Directory of the tunnel sockets. Default PREVIEW_SOCKET_DIR. */
  socketDir?: string;
  log: Pick<Logger, 'warn'>;
}

/** Runs one transfer; never throws (a failure to start is reported on the tunnel, others logged). */
export function runTransfer(open: TransferOpen, options: TransferRunnerOptions): void {
  const connect: net.NetConnectOpts & { writableHighWaterMark: number } = {
    path: join(options.socketDir ?? PREVIEW_SOCKET_DIR, open.socket),
    writableHighWaterMark: TUNNEL_HIGH_WATER_MARK_BYTES,
    // The control plane ends its side once the archive is sent; the END frame still goes back.
    allowHalfOpen: true,
  };
  const tunnel = net.connect(connect);
  tunnel.on('error', (err) => {
    options.log.warn({ err, kind: open.op.kind }, 'transfer tunnel failed');
    tunnel.destroy();
  });
  tunnel.once('connect', () => start(tunnel, open, options));
}

function start(tunnel: net.Socket, open: TransferOpen, options: TransferRunnerOptions): void {
  const unpack = open.op.kind === 'unpack';
  let child: ChildProcess;
  try {
    child = spawn(TRANSFER_SHELL[0]!, [...TRANSFER_SHELL.slice(1), ...transferArgv(open.op)], {
      cwd: '/',
      // LC_ALL=C: tar's complaints are read by their English words (control-plane/files/transfer-errors.ts).
      env: { PATH: TRANSFER_PATH, LC_ALL: 'C' },
      uid: options.toolUser.uid,
      gid: options.toolUser.gid,
      // Its own process group: a transfer the control plane abandons is ended whole.
      detached: true,
      // An unpack's stdin is the tunnel itself (its descriptor shared): the archive goes from the
      // control plane to tar with no copy through the agent, which reads nothing from it.
      stdio: [unpack ? tunnel : 'ignore', unpack ? 'ignore' : 'pipe', 'pipe'],
    });
  } catch (err) {
    refuse(tunnel, open.connId, (err as Error).message);
    return;
  }
  let started = false;
  child.once('error', (err) => {
    if (!started) refuse(tunnel, open.connId, err.message);
  });
  child.once('spawn', () => {
    started = true;
    const dialed: PreviewDialed = { id: open.connId, ok: true };
    tunnel.write(`${JSON.stringify(dialed)}\n`);
    carry(tunnel, child, unpack);
  });
}

/** The failed `PreviewDialed` line, then the end of the tunnel. */
function refuse(tunnel: net.Socket, id: string, message: string): void {
  const dialed: PreviewDialed = { id, ok: false, code: 'failed', message: message.slice(0, 300) };
  tunnel.end(`${JSON.stringify(dialed)}\n`);
}

function carry(tunnel: net.Socket, child: ChildProcess, unpack: boolean): void {
  const stderr: Buffer[] = [];
  let stderrBytes = 0;
  child.stderr!.on('data', (chunk: Buffer) => {
    if (stderrBytes >= TRANSFER_STDERR_MAX_BYTES) return;
    const kept = chunk.subarray(0, TRANSFER_STDERR_MAX_BYTES - stderrBytes);
    stderr.push(kept);
    stderrBytes += kept.length;
  });
  if (!unpack) {
    const stdout = child.stdout!;
    stdout.on('data', (chunk: Buffer) => {
      if (!writeFrame(tunnel, TRANSFER_FRAME.data, chunk)) {
        stdout.pause();
        tunnel.once('drain', () => stdout.resume());
      }
    });
  }
  let exited = false;
  child.once('close', (exitCode: number | null, signal: NodeJS.Signals | null) => {
    exited = true;
    if (tunnel.destroyed) return;
    const end: TransferEnd = { exitCode, signal, stderr: Buffer.concat(stderr).toString('utf8') };
    writeFrame(tunnel, TRANSFER_FRAME.end, Buffer.from(JSON.stringify(end)));
    // Closed once the frame is flushed: whatever the control plane still sends is not read.
    tunnel.end(() => tunnel.destroy());
  });
  // The control plane gone or done with it before the script ended: the script ends too (its
  // traps clean up what it staged).
  tunnel.once('close', () => {
    if (!exited && child.pid !== undefined) {
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        // Already gone.
      }
    }
  });
}

/** Writes one frame (header and payload in one write); false: the tunnel is full, wait for 'drain'. */
function writeFrame(tunnel: net.Socket, type: number, payload: Buffer): boolean {
  const header = Buffer.allocUnsafe(TRANSFER_FRAME_HEADER_BYTES);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 1);
  tunnel.cork();
  tunnel.write(header);
  const room = tunnel.write(payload);
  tunnel.uncork();
  return room;
}
