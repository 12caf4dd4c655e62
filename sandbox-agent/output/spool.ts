/**
 * Spools one output stream to a file in the agent's private spool directory, up to a cap, so
 * a stream longer than what the result keeps can become an artifact. Writes go through a file
 * stream; `write` returns false when its buffer is full, and the caller pauses the pipe it
 * reads until `drain` (bounded memory at any output rate).
 */
import { createHash } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Bytes all spools of a sandbox may hold together (disk): concurrent calls and background tasks
 * share it, so their sum stays bounded whatever each one's own cap.
 */
export class SpoolBudget {
  constructor(private remaining: number) {}

  /** Grants up to `bytes`; returns how many were granted. */
  take(bytes: number): number {
    const granted = Math.min(bytes, this.remaining);
    this.remaining -= granted;
    return granted;
  }

  give(bytes: number): void {
    this.remaining += bytes;
  }
}

/**
 * What a spool's file stream may hold before its source is paused, bytes. With the default
 * 16 KiB every 64 KiB pipe read paused the program until a thread-pool write came back (200 MB
 * of stdout: 3,200 stalls); a few reads' worth keeps the disk busy while the pipe is read.
 */
const SPOOL_BUFFER_BYTES = 1024 * 1024;

export class StreamSpool {
  private readonly file: WriteStream;
  private written = 0;
  private capped = false;
  /** Of the bytes spooled, as they are written: the artifact's digest with no second read. */
  private readonly hash = createHash('sha256');
  private digest: string | null = null;

  /** `dir`: the spool directory; `name`: a file name unique to the attempt and stream; `maxBytes`: the cap; `budget`: shared with the sandbox's other spools. */
  constructor(
    dir: string,
    name: string,
    private readonly maxBytes: number,
    private readonly budget: SpoolBudget,
  ) {
    this.path = join(dir, name);
    this.file = createWriteStream(this.path, { mode: 0o600, highWaterMark: SPOOL_BUFFER_BYTES });
  }

  readonly path: string;

  /** Bytes spooled so far (≤ the cap). */
  get bytes(): number {
    return this.written;
  }

  /** True once output beyond the cap was dropped. */
  get truncated(): boolean {
    return this.capped;
  }

  /** Appends bytes up to the cap. False: the file stream is full, wait for `onDrain`. */
  write(data: Buffer): boolean {
    const room = this.maxBytes - this.written;
    // Once cut, nothing more: a later byte after a gap would splice the stream.
    if (this.capped || room <= 0) {
      this.capped ||= data.length > 0;
      return true;
    }
    const part = data.subarray(0, this.budget.take(Math.min(room, data.length)));
    if (part.length < data.length) this.capped = true;
    if (part.length === 0) return true;
    this.written += part.length;
    this.hash.update(part);
    return this.file.write(part);
  }

  /** The sha256 (hex) of the bytes spooled; read it after `close` (the hash ends when it is read). */
  get sha256(): string {
    this.digest ??= this.hash.digest('hex');
    return this.digest;
  }

  onDrain(fn: () => void): void {
    this.file.once('drain', fn);
  }

  /** Flushes and closes the file. */
  close(): Promise<void> {
    return new Promise((resolve, reject) => this.file.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }

  /** Deletes the file (if still there) and gives its bytes back to the budget. Once. */
  async remove(): Promise<void> {
    // Closed first: a file stream not yet open would otherwise create the file after the rm.
    if (!this.file.closed) await new Promise<void>((resolve) => this.file.destroy().once('close', () => resolve()));
    await rm(this.path, { force: true });
    this.budget.give(this.written);
    this.written = 0;
  }
}
