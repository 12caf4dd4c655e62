/**
 * Spools one output stream to a file in the agent's private spool directory, up to a cap, so
 * a stream longer than what the result keeps can become an artifact. Writes go through a file
 * stream; `write` returns false when its buffer is full, and the caller pauses the pipe it
 * reads until `drain` (bounded memory at any output rate).
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';

export class StreamSpool {
  private readonly file: WriteStream;
  private written = 0;
  private capped = false;

  /** `dir`: the spool directory; `name`: a file name unique to the attempt and stream; `maxBytes`: the cap. */
  constructor(
    dir: string,
    name: string,
    private readonly maxBytes: number,
  ) {
    this.path = join(dir, name);
    this.file = createWriteStream(this.path, { mode: 0o600 });
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
    if (room <= 0) {
      this.capped ||= data.length > 0;
      return true;
    }
    const part = data.length <= room ? data : data.subarray(0, room);
    if (part.length < data.length) this.capped = true;
    this.written += part.length;
    return this.file.write(part);
  }

  onDrain(fn: () => void): void {
    this.file.once('drain', fn);
  }

  /** Flushes and closes the file. */
  close(): Promise<void> {
    return new Promise((resolve, reject) => this.file.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }

  async remove(): Promise<void> {
    await rm(this.path, { force: true });
  }
}
