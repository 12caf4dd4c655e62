/**
 * File transfers, the sandbox's side (contract/transfers.ts): for each `TransferOpen` the
 * control plane sends, connect to the tunnel socket, start the op's script as the tool user and
 * carry its bytes: the tunnel into its stdin (`unpack`), its stdout onto the tunnel in DATA
 * frames (`pack`, `realpath`); then one END frame with how it exited. An `artifact` op is the shelf's
 * (link/artifact-shelf.ts). The agent decides nothing about which
 * paths may be transferred (the control plane checked the policy; the scripts check where each
 * path resolves inside the sandbox); it only runs them as the tool user, never as itself.
 */
import { bytesPassed } from '../output/buffer-reclaim.js';
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { PREVIEW_SOCKET_DIR, type PreviewDialed } from '../../contract/previews.js';
import { dialChannel, type LinkRoute } from './link-dial.js';
import {
  TRANSFER_FRAME,
  TRANSFER_PATH,
  TRANSFER_SHELL,
  TRANSFER_STDERR_MAX_BYTES,
  UPLOAD_TAR_OPTIONS,
  transferArgv,
  type ScriptOp,
  type TransferEnd,
  type TransferOpen,
} from '../../contract/transfers.js';
import type { ArtifactShelf } from '../link/artifact-shelf.js';
import type { ProcessTrees } from './process-trees.js';
import { writeFrame } from '../link/frames.js';
import { signalGroup } from './process-sweep.js';

/**
 * What the tunnel may hold before the script's stdout is paused, bytes: a pipe read is up to
 * 64 KiB, so a few reads in flight, no more (each transfer holds this much of the sandbox's memory).
 */
const TUNNEL_HIGH_WATER_MARK_BYTES = 256 * 1024;

export interface TransferRunnerOptions {
  /** Who the scripts run as: the lease's tool user (the agent's config). */
  toolUser: { uid: number; gid: number };
  /** The artifacts the agent holds (op `artifact`). */
  shelf: ArtifactShelf;
  /** Where a running script's tree is kept, so the sweep after a call spares it and it cannot be signalled as the tool user's own. */
  processTrees: Pick<ProcessTrees, 'keep' | 'release'>;
  /** Directory of the tunnel sockets. Default PREVIEW_SOCKET_DIR. */
  socketDir?: string;
  /** The lease and its node relay link, if any (link-dial.ts). */
  route: LinkRoute;
  log: Pick<Logger, 'warn'>;
}

/** Runs one transfer; never throws (a failure to start is reported on the tunnel, others logged). */
export function runTransfer(open: TransferOpen, options: TransferRunnerOptions): void {
  const connect: net.NetConnectOpts & { path: string; writableHighWaterMark: number } = {
    path: join(options.socketDir ?? PREVIEW_SOCKET_DIR, open.socket),
    writableHighWaterMark: TUNNEL_HIGH_WATER_MARK_BYTES,
    // The control plane ends its side once the archive is sent; the END frame still goes back.
    allowHalfOpen: true,
  };
  const tunnel = dialChannel(connect, options.route, { channel: 'tunnel', socket: open.socket });
  tunnel.on('error', (err) => {
    options.log.warn({ err, kind: open.op.kind }, 'transfer tunnel failed');
    tunnel.destroy();
  });
  tunnel.once('connect', () => {
    const { op } = open;
    if (op.kind !== 'artifact') {
      start(tunnel, open.connId, op, options);
      return;
    }
    const dialed: PreviewDialed = { id: open.connId, ok: true };
    tunnel.write(`${JSON.stringify(dialed)}\n`);
    void options.shelf.serve(tunnel, op.artifactId, op.discard);
  });
}

function start(tunnel: net.Socket, connId: string, op: ScriptOp, options: TransferRunnerOptions): void {
  const unpack = op.kind === 'unpack';
  let child: ChildProcess;
  try {
    child = spawn(TRANSFER_SHELL[0]!, [...TRANSFER_SHELL.slice(1), ...transferArgv(op)], {
      cwd: '/',
      // LC_ALL=C: tar's complaints are read by their English words (control-plane/files/transfer-errors.ts).
      env: { PATH: TRANSFER_PATH, LC_ALL: 'C', ...(unpack ? { TAR_OPTIONS: UPLOAD_TAR_OPTIONS } : {}) },
      uid: options.toolUser.uid,
      gid: options.toolUser.gid,
      // Its own process group: a transfer the control plane abandons is ended whole.
      detached: true,
      // A pipe of its own, never the tunnel's descriptor: the script (and a tar the sandbox may
      // have put first on PATH) can only read the archive, never write to the control plane.
      stdio: [unpack ? 'pipe' : 'ignore', unpack ? 'ignore' : 'pipe', 'pipe'],
    });
  } catch (err) {
    refuse(tunnel, connId, (err as Error).message);
    return;
  }
  let started = false;
  child.once('error', (err) => {
    if (!started) refuse(tunnel, connId, err.message);
  });
  child.once('spawn', () => {
    started = true;
    // detached: setsid(2), so its session id is its pid.
    const sid = child.pid!;
    options.processTrees.keep(sid, { kind: 'transfer', id: connId });
    child.once('close', () => options.processTrees.release(sid));
    const dialed: PreviewDialed = { id: connId, ok: true };
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
  if (unpack) {
    // A script that stops reading early (tar failed) must not fail the agent with EPIPE.
    child.stdin!.on('error', () => undefined);
    tunnel.on('data', (chunk: Buffer) => bytesPassed(chunk.length));
    tunnel.pipe(child.stdin!);
  } else {
    const stdout = child.stdout!;
    stdout.on('data', (chunk: Buffer) => {
      bytesPassed(chunk.length);
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
    tunnel.end();
    // Whatever the control plane still sends is read to nothing, so its end is seen and the tunnel closes.
    tunnel.unpipe();
    tunnel.resume();
  });
  // The control plane gone or done with it before the script ended: the script ends too (its
  // traps clean up what it staged).
  tunnel.once('close', () => {
    if (!exited && child.pid !== undefined) signalGroup(child.pid, 'SIGTERM');
  });
}
