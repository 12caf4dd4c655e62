/**
 * Uploads and downloads through the sandbox's agent (contract/transfers.ts): the bytes go over
 * an agent tunnel (agent-link/tunnels.ts), never through Redis or the container engine's exec.
 * `unpack` writes a checked archive into the script's stdin; `pack` reads the script's tar back
 * out of DATA frames, `realpath` a canonical path. Each ends with the END frame saying how the
 * script exited.
 */
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { TRANSFER_IDLE_TIMEOUT_MS, type TransferEnd, type TransferOp } from '../../contract/transfers.js';
import type { Tunnel } from '../agent-link/tunnels.js';
import { broken, FrameReader, framedData, stallAfter } from '../agent-link/frames.js';

/** What file transfers need of the agent tunnels. */
export interface TransferTunnels {
  openTransfer(leaseId: string, op: TransferOp): Promise<Tunnel>;
}

/**
 * Unpacks `archive` into the sandbox with `op` (an `unpack`). `archive` ends with the op's
 * completion mark when whole; a failing `archive` (a refused entry) ends the stream without it,
 * so the script moves nothing. Resolves with the script's END; throws `archive`'s error first
 * when it failed, `files.transfer_broken` when the tunnel broke.
 */
export async function unpackThroughAgent(
  tunnels: TransferTunnels,
  leaseId: string,
  op: TransferOp,
  archive: Readable,
): Promise<TransferEnd> {
  let archiveError: unknown = null;
  let socket: Socket | null = null;
  // Listened to at once: the archive may fail before the tunnel is open.
  archive.on('error', (err) => {
    archiveError = err;
    // A clean end without the mark: the script sees an archive that is not whole and keeps nothing.
    socket?.end();
  });
  try {
    const tunnel = (await tunnels.openTransfer(leaseId, op)).socket;
    socket = tunnel;
    const ended = new Promise<TransferEnd>((resolve, reject) => {
      // An unpack's script writes nothing but the END frame; other bytes are read past.
      const reader = new FrameReader(() => true, resolve);
      tunnel.on('error', reject);
      // After an END this settles nothing (the promise already did).
      tunnel.once('close', () => reject(broken('the tunnel closed before the end frame')));
      reader.on('error', (err) => {
        tunnel.destroy();
        reject(err);
      });
      tunnel.pipe(reader);
    });
    stallAfter(tunnel, TRANSFER_IDLE_TIMEOUT_MS);
    // The script may take its time moving the staged tree once the whole archive is in.
    archive.once('end', () => tunnel.setTimeout(0));
    if (archiveError) tunnel.end();
    else archive.pipe(tunnel);
    const end = await ended;
    if (archiveError) throw archiveError;
    return end;
  } catch (err) {
    throw archiveError ?? err;
  } finally {
    if (socket) archive.unpipe(socket);
    archive.destroy();
    socket?.destroy();
  }
}

/**
 * A tar of `op`'s path (a `pack`), or the script's failure: waits for the first DATA frame (or
 * the END frame) so a path that cannot be archived is an error, not an empty body; a failure
 * after it destroys the stream with `onFailure(end)`'s error (never a complete-looking archive).
 */
export async function packThroughAgent(
  tunnels: TransferTunnels,
  leaseId: string,
  op: TransferOp,
  onFailure: (end: TransferEnd) => Error,
): Promise<Readable> {
  const { socket } = await tunnels.openTransfer(leaseId, op);
  const { data, started } = framedData(socket, (end, dataBytes) => {
    if (end.exitCode !== 0) return onFailure(end);
    return dataBytes === 0 ? onFailure({ ...end, stderr: 'tar produced no archive' }) : null;
  });
  // The client gone mid-download: the agent sees the tunnel close and ends the script.
  data.once('close', () => socket.destroy());
  await started;
  return data;
}

/** Most bytes a canonical path may take (SandboxPath's 4096 and room for the resolved symlinks). */
const REALPATH_MAX_BYTES = 16 * 1024;
/** Longest a path's resolution may take in all, ms: a sandbox that trickles its answer holds no socket longer. */
const REALPATH_TIMEOUT_MS = 10_000;

/**
 * The canonical form of `path` in the sandbox as its tool user sees it (the agent runs
 * REALPATH_SCRIPT: symlinks of the longest existing prefix resolved, the missing rest kept).
 * Throws what `onFailure` makes of a failed script, `files.transfer_broken` for a broken stream,
 * an answer over REALPATH_MAX_BYTES or none whole within `timeoutMs` (default REALPATH_TIMEOUT_MS).
 */
export async function realpathThroughAgent(
  tunnels: TransferTunnels,
  leaseId: string,
  path: string,
  onFailure: (end: TransferEnd) => Error,
  timeoutMs = REALPATH_TIMEOUT_MS,
): Promise<string> {
  const { socket } = await tunnels.openTransfer(leaseId, { kind: 'realpath', path });
  const { data } = framedData(socket, (end) => (end.exitCode === 0 ? null : onFailure(end)));
  const timer = setTimeout(() => data.destroy(broken(`no whole answer within ${timeoutMs} ms`)), timeoutMs);
  const chunks: Buffer[] = [];
  let bytes = 0;
  try {
    for await (const chunk of data as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > REALPATH_MAX_BYTES) throw broken(`a canonical path over ${REALPATH_MAX_BYTES} bytes`);
      chunks.push(chunk);
    }
  } finally {
    clearTimeout(timer);
    socket.destroy();
  }
  return Buffer.concat(chunks).toString('utf8');
}
