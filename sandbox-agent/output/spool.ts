/**
 * Spools one output stream to a file in the agent's private spool directory, up to a cap, so
 * a stream longer than what the result keeps can become an artifact. The first
 * SPOOL_IN_MEMORY_BYTES are held in memory: most calls print less, and then no file is made
 * unless the stream becomes an artifact (`persist`). Past that, writes go through a file
 * stream; `write` returns false when its buffer is full, and the caller pauses the pipe it
 * reads until `drain` (bounded memory at any output rate).
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, type WriteStream } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
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

/**
 * Bytes a spool holds in memory before it opens its file. A file per stream per call cost
 * `exec true` an open, a close and an unlink twice (about 0.8 ms of the agent's CPU a call);
 * a call's output rarely outgrows this, and concurrent calls hold at most this each.
 */
export const SPOOL_IN_MEMORY_BYTES = 64 * 1024;

export class StreamSpool {
  /** The file stream, once the spool outgrew memory. */
  private file: WriteStream | null = null;
  /** What was spooled while no file existed (copies: a slice would keep its whole read buffer alive). */
  private held: Buffer[] = [];
  /** Whether `path` exists: the file stream opened it, or `persist` wrote it. */
  private onDisk = false;
  private written = 0;
  private capped = false;

  /** `dir`: the spool directory; `name`: a file name unique to the attempt and stream; `maxBytes`: the cap; `budget`: shared with the sandbox's other spools. */
  constructor(
    dir: string,
    name: string,
    private readonly maxBytes: number,
    private readonly budget: SpoolBudget,
  ) {
    this.path = join(dir, name);
  }

  /** Where the spool's file is, once `persist` resolved (or the stream outgrew memory). */
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
    if (this.file) return this.file.write(part);
    if (this.written <= SPOOL_IN_MEMORY_BYTES) {
      this.held.push(Buffer.from(part));
      return true;
    }
    this.file = createWriteStream(this.path, { mode: 0o600, highWaterMark: SPOOL_BUFFER_BYTES });
    this.onDisk = true;
    for (const chunk of this.held.splice(0)) this.file.write(chunk);
    return this.file.write(part);
  }

  /**
   * The sha256 (hex) of the bytes spooled, read back after `close`. Only for a spool that was
   * cut (`truncated`): an uncut one holds exactly the stream, whose sha256 the output pipeline
   * computed already (one hash of a 200 MB stream was ~125 ms of the agent's CPU).
   */
  async sha256(): Promise<string> {
    const hash = createHash('sha256');
    if (!this.onDisk) return hash.update(Buffer.concat(this.held)).digest('hex');
    for await (const chunk of createReadStream(this.path)) hash.update(chunk as Buffer);
    return hash.digest('hex');
  }

  /** Calls `fn` once the file stream has room again (at once when the spool is in memory: it never refuses). */
  onDrain(fn: () => void): void {
    if (this.file) this.file.once('drain', fn);
    else queueMicrotask(fn);
  }

  /** Flushes and closes the file, if the spool has one; no more writes follow. */
  close(): Promise<void> {
    const file = this.file;
    if (!file) return Promise.resolve();
    return new Promise((resolve, reject) => file.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }

  /** After `close`: makes sure the spooled bytes are in the file at `path` (writes what memory holds). */
  async persist(): Promise<void> {
    if (this.onDisk) return;
    await writeFile(this.path, Buffer.concat(this.held), { mode: 0o600 });
    this.onDisk = true;
    this.held = [];
  }

  /** Deletes the file (if there is one) and gives its bytes back to the budget. Once. */
  async remove(): Promise<void> {
    // Closed first: a file stream not yet open would otherwise create the file after the rm.
    const file = this.file;
    if (file && !file.closed) await new Promise<void>((resolve) => file.destroy().once('close', () => resolve()));
    if (this.onDisk) await rm(this.path, { force: true });
    this.held = [];
    this.budget.give(this.written);
    this.written = 0;
  }
}
