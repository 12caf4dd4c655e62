/**
 * The control plane's side of the transfer frames (contract/transfers.ts) an agent sends back on
 * a tunnel: a type byte, a 32-bit big-endian payload length, the payload.
 */
import type { Socket } from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import { AppError } from '../../contract/errors.js';
import {
  TRANSFER_FRAME,
  TRANSFER_FRAME_HEADER_BYTES,
  TRANSFER_FRAME_MAX_BYTES,
  TRANSFER_IDLE_TIMEOUT_MS,
  TransferEnd,
} from '../../contract/transfers.js';

/**
 * Parses the agent's frames (contract/transfers.ts) from a tunnel: DATA payloads go to `onData`
 * in the pieces they arrive in, never gathered into whole frames (false: pause until `resume`
 * is called), the END frame to `onEnd`. A frame of an unknown type, over
 * TRANSFER_FRAME_MAX_BYTES, an END that is not a `TransferEnd`, bytes after the END or a stream
 * ending before it is `files.transfer_broken` (a broken stream, not the script's doing).
 */
export class FrameReader extends Writable {
  /** Bytes of a frame header read so far (headers may be split across chunks). */
  private header: Buffer = Buffer.alloc(0);
  /** The frame being read: its type and the payload bytes still to come. */
  private frame: { type: number; remaining: number } | null = null;
  /** The END frame's payload so far (DATA payloads are never kept). */
  private endPayload: Buffer[] = [];
  private ended = false;

  constructor(
    private readonly onData: (payload: Buffer, resume: () => void) => boolean,
    private readonly onEnd: (end: TransferEnd) => void,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.take(chunk, callback);
  }

  /** Reads `chunk` frame by frame; calls `callback` once all of it is taken (or a frame is refused). */
  private take(chunk: Buffer, callback: (err?: Error | null) => void): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.ended) {
        callback(broken('bytes after the end frame'));
        return;
      }
      if (!this.frame) {
        const need = TRANSFER_FRAME_HEADER_BYTES - this.header.length;
        this.header = Buffer.concat([this.header, chunk.subarray(at, at + need)]);
        at += Math.min(need, chunk.length - at);
        if (this.header.length < TRANSFER_FRAME_HEADER_BYTES) break;
        const type = this.header.readUInt8(0);
        const length = this.header.readUInt32BE(1);
        this.header = Buffer.alloc(0);
        if ((type !== TRANSFER_FRAME.data && type !== TRANSFER_FRAME.end) || length > TRANSFER_FRAME_MAX_BYTES) {
          callback(broken(`a frame of type ${type} and ${length} bytes`));
          return;
        }
        this.frame = { type, remaining: length };
      }
      const frame = this.frame;
      const piece = chunk.subarray(at, at + frame.remaining);
      at += piece.length;
      frame.remaining -= piece.length;
      if (frame.type === TRANSFER_FRAME.end) {
        this.endPayload.push(piece);
        if (frame.remaining > 0) continue;
        this.frame = null;
        const end = TransferEnd.safeParse(parseJson(Buffer.concat(this.endPayload)));
        if (!end.success) {
          callback(broken('an end frame that is not one'));
          return;
        }
        this.ended = true;
        this.onEnd(end.data);
        continue;
      }
      if (frame.remaining === 0) this.frame = null;
      if (piece.length > 0 && !this.onData(piece, () => this.take(chunk.subarray(at), callback))) return;
    }
    callback();
  }

  override _final(callback: (err?: Error | null) => void): void {
    callback(this.ended ? null : broken('the tunnel ended before the end frame'));
  }
}

/** The DATA of a tunnel's frames as one stream (framedData). */
export interface FramedData {
  /** The DATA payloads in order; ends after an END `failureOf` accepts, else destroyed with an error. */
  data: PassThrough;
  /** Resolves at the first DATA byte or at the stream's end; rejects when it failed before either. */
  started: Promise<void>;
}

/**
 * The DATA payloads the agent sends on `socket` as a stream whose reader's pace holds the tunnel
 * (backpressure pauses the socket). It ends after the END frame when `failureOf(end, dataBytes)`
 * says null, and is destroyed with its error otherwise, with `files.transfer_broken` when the
 * frames break, with the socket's error, or after TRANSFER_IDLE_TIMEOUT_MS without a byte. The
 * socket is destroyed on any failure and when the stream closes before its end was read (its
 * reader went away); after a clean end it is the caller's.
 */
export function framedData(socket: Socket, failureOf: (end: TransferEnd, dataBytes: number) => Error | null): FramedData {
  const data = new PassThrough();
  let dataBytes = 0;
  let start!: { resolve: () => void; reject: (err: Error) => void };
  const started = new Promise<void>((resolve, reject) => (start = { resolve, reject }));
  // Only some callers wait for the start, and a stream may fail before its reader listens:
  // the failure stays on both (an errored stream fails a later pipeline), never unhandled.
  started.catch(() => undefined);
  data.on('error', () => undefined);
  const fail = (err: Error): void => {
    socket.destroy();
    start.reject(err);
    data.destroy(err);
  };
  const reader = new FrameReader(
    (payload, resume) => {
      dataBytes += payload.length;
      start.resolve();
      const room = data.write(payload);
      if (!room) data.once('drain', resume);
      return room;
    },
    (end) => {
      const failure = failureOf(end, dataBytes);
      if (failure) return fail(failure);
      start.resolve();
      data.end();
    },
  );
  reader.on('error', fail);
  socket.on('error', fail);
  data.once('close', () => {
    if (!data.readableEnded) socket.destroy();
  });
  stallAfter(socket, TRANSFER_IDLE_TIMEOUT_MS);
  socket.pipe(reader);
  return { data, started };
}

/** Destroys `socket` with `files.transfer_broken` once no byte moved either way for `idleMs`. */
export function stallAfter(socket: Socket, idleMs: number): void {
  socket.setTimeout(idleMs, () => socket.destroy(broken(`no bytes moved for ${idleMs} ms`)));
}

/** `files.transfer_broken`: the agent's stream is not what the protocol says, or ended early. */
export function broken(what: string): AppError {
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
