/**
 * Uploads and downloads through the sandbox's agent (contract/transfers.ts): the bytes go over
 * an agent tunnel (agent-link/tunnels.ts), never through Redis or the container engine's exec.
 * `unpack` writes a checked archive into the script's stdin; `pack` reads the script's tar back
 * out of DATA frames. Either ends with the END frame saying how the script exited.
 */
import type { Socket } from 'node:net';
import { PassThrough, Writable, type Readable } from 'node:stream';
import { AppError } from '../../contract/errors.js';
import {
  TRANSFER_FRAME,
  TRANSFER_FRAME_HEADER_BYTES,
  TRANSFER_FRAME_MAX_BYTES,
  TransferEnd,
  type TransferOp,
} from '../../contract/transfers.js';
import type { Tunnel } from '../agent-link/tunnels.js';

/** What file transfers need of the agent tunnels. */
export interface TransferTunnels {
  openTransfer(leaseId: string, op: TransferOp): Promise<Tunnel>;
}

/**
 * Parses the agent's frames (contract/transfers.ts) from a tunnel: DATA payloads go to `onData`
 * (false: pause until `resume` is called), the END frame to `onEnd`. A frame of an unknown type,
 * over TRANSFER_FRAME_MAX_BYTES, or an END that is not a `TransferEnd` is
 * (`files.transfer_broken`: a broken stream, not the script's doing). Exported for its fuzz test.
 */
export class FrameReader extends Writable {
  private buffered: Buffer = Buffer.alloc(0);
  private ended = false;

  constructor(
    private readonly onData: (payload: Buffer, resume: () => void) => boolean,
    private readonly onEnd: (end: TransferEnd) => void,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    this.drain(callback);
  }

  /** Hands over every whole frame buffered; calls `callback` once all are taken (or one is refused). */
  private drain(callback: (err?: Error | null) => void): void {
    while (this.buffered.length >= TRANSFER_FRAME_HEADER_BYTES) {
      const type = this.buffered.readUInt8(0);
      const length = this.buffered.readUInt32BE(1);
      if (this.ended || (type !== TRANSFER_FRAME.data && type !== TRANSFER_FRAME.end) || length > TRANSFER_FRAME_MAX_BYTES) {
        callback(broken(this.ended ? 'bytes after the end frame' : `a frame of type ${type} and ${length} bytes`));
        return;
      }
      if (this.buffered.length < TRANSFER_FRAME_HEADER_BYTES + length) break;
      const payload = this.buffered.subarray(TRANSFER_FRAME_HEADER_BYTES, TRANSFER_FRAME_HEADER_BYTES + length);
      this.buffered = this.buffered.subarray(TRANSFER_FRAME_HEADER_BYTES + length);
      if (type === TRANSFER_FRAME.end) {
        const end = TransferEnd.safeParse(parseJson(payload));
        if (!end.success) {
          callback(broken('an end frame that is not one'));
          return;
        }
        this.ended = true;
        this.onEnd(end.data);
        continue;
      }
      if (!this.onData(payload, () => this.drain(callback))) return;
    }
    callback();
  }

  override _final(callback: (err?: Error | null) => void): void {
    callback(this.ended ? null : broken('the tunnel ended before the end frame'));
  }
}

/**
 * Unpacks `archive` into the sandbox with `op` (an `unpack`). `archive` ends with the op's
 * completion mark when whole; a failing `archive` (a refused entry) ends the stream without it,
 * so the script moves nothing. Resolves with the script's END; throws `archiveFailure(err)`'s
 * error first when `archive` failed, `files.transfer_broken` when the tunnel broke.
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
  const out = new PassThrough();
  return new Promise<Readable>((resolve, reject) => {
    let first = true;
    const fail = (err: Error): void => {
      socket.destroy();
      if (first) reject(err);
      else out.destroy(err);
    };
    const reader = new FrameReader(
      (payload, resume) => {
        const room = out.write(payload);
        if (first) {
          first = false;
          resolve(out);
        }
        if (!room) out.once('drain', resume);
        return room;
      },
      (end) => {
        if (end.exitCode !== 0) fail(onFailure(end));
        else if (first) fail(onFailure({ ...end, stderr: 'tar produced no archive' }));
        else out.end();
      },
    );
    reader.on('error', fail);
    socket.on('error', fail);
    // The client gone mid-download: the agent sees the tunnel close and ends the script.
    out.once('close', () => socket.destroy());
    socket.pipe(reader);
  });
}

function broken(what: string): AppError {
  return new AppError('files.transfer_broken', `the transfer stream from the sandbox's agent broke: ${what}`, {
    details: { reason: what },
  });
}

function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return null;
  }
}
