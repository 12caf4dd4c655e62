/**
 * Output pipeline of one process: counts and hashes every byte of stdout and stderr, keeps up to
 * `maxKeptBytes` per stream for the result, and turns the kept bytes into ordered `output`
 * events in batches (fewer, larger queue messages without holding output back for long).
 *
 * Pure apart from a timer: the sink decides where events go.
 */
import { createHash, type Hash } from 'node:crypto';
import type { OutputStream } from '../../contract/events.js';

export interface OutputSink {
  /** A batch of kept bytes of one stream starting at byte `offset` of that stream. */
  chunk(stream: OutputStream, offset: number, data: Buffer): void;
  /** The stream passed `keptBytes`; nothing more of it is emitted. Called once per stream. */
  truncated(stream: OutputStream, keptBytes: number): void;
}

export interface OutputPipelineOptions {
  /** Bytes kept per stream (events + result). */
  maxKeptBytes: number;
  /** A batch is flushed once it holds this many bytes. Default 64 KiB. */
  maxBatchBytes?: number;
  /** A non-empty batch is flushed after this long, ms. Default 20. */
  flushIntervalMs?: number;
}

interface StreamState {
  total: number;
  kept: Buffer[];
  keptBytes: number;
  hash: Hash;
  truncated: boolean;
  /** The last TAIL_BYTES bytes written, for a model text that shows the end of long output. */
  tail: TailRing;
}

/** Bytes of each stream's end kept for the model text. */
const TAIL_BYTES = 8 * 1024;

/**
 * The last `capacity` bytes of a stream, in one buffer allocated at the stream's first byte: a
 * write copies into it (wrapping around) rather than allocating a new tail per chunk, which for
 * every 64 KiB read of a long output was an 8 KiB buffer outside V8's heap, and for a run of
 * small writes an 8 KiB concatenation each. A stream that writes nothing (`exec true`'s)
 * allocates nothing.
 */
export class TailRing {
  private ring: Buffer | null = null;
  /** Where the next byte goes. */
  private end = 0;
  private filled = 0;

  constructor(private readonly capacity: number) {}

  /** Keeps `data`'s bytes as the newest, dropping the oldest past `capacity`. */
  write(data: Buffer): void {
    const cap = this.capacity;
    if (data.length === 0 || cap === 0) return;
    // Only the bytes handed out by bytes() are ever read, and those were all written: no need to zero.
    const ring = (this.ring ??= Buffer.allocUnsafeSlow(cap));
    if (data.length >= cap) {
      data.copy(ring, 0, data.length - cap);
      this.end = 0;
      this.filled = cap;
      return;
    }
    const first = Math.min(data.length, cap - this.end);
    data.copy(ring, this.end, 0, first);
    data.copy(ring, 0, first);
    this.end = (this.end + data.length) % cap;
    this.filled = Math.min(cap, this.filled + data.length);
  }

  /** The kept bytes, oldest first (a copy). */
  bytes(): Buffer {
    const ring = this.ring;
    if (ring === null) return Buffer.alloc(0);
    if (this.filled < this.capacity) return Buffer.from(ring.subarray(0, this.filled));
    return Buffer.concat([ring.subarray(this.end), ring.subarray(0, this.end)], this.capacity);
  }
}

/** Facts about one stream once the process is done. */
export interface StreamSummary {
  bytes: number;
  sha256: string;
  keptBytes: number;
  kept: Buffer;
  /** The stream's last bytes (up to 8 KiB), whatever was kept. */
  tail: Buffer;
}

export class OutputPipeline {
  private readonly streams: Record<OutputStream, StreamState>;
  private pending: { stream: OutputStream; offset: number; parts: Buffer[]; bytes: number } | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly maxBatchBytes: number;
  private readonly flushIntervalMs: number;

  constructor(
    private readonly sink: OutputSink,
    private readonly options: OutputPipelineOptions,
  ) {
    const fresh = (): StreamState => ({
      total: 0,
      kept: [],
      keptBytes: 0,
      hash: createHash('sha256'),
      truncated: false,
      tail: new TailRing(TAIL_BYTES),
    });
    this.streams = { stdout: fresh(), stderr: fresh() };
    this.maxBatchBytes = options.maxBatchBytes ?? 64 * 1024;
    this.flushIntervalMs = options.flushIntervalMs ?? 20;
  }

  /** Feeds bytes the process wrote to `stream`, in order. */
  write(stream: OutputStream, data: Buffer): void {
    const state = this.streams[stream];
    state.hash.update(data);
    state.total += data.length;
    state.tail.write(data);
    if (state.truncated) return;
    const room = this.options.maxKeptBytes - state.keptBytes;
    const keep = data.length <= room ? data : data.subarray(0, room);
    if (keep.length > 0) {
      const offset = state.keptBytes;
      state.kept.push(keep);
      state.keptBytes += keep.length;
      this.enqueue(stream, offset, keep);
    }
    if (keep.length < data.length) {
      state.truncated = true;
      this.flush();
      this.sink.truncated(stream, state.keptBytes);
    }
  }

  /** Emits whatever is batched. Call once the process's streams have closed. */
  flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.pending;
    if (!batch) return;
    this.pending = null;
    this.sink.chunk(batch.stream, batch.offset, batch.parts.length === 1 ? batch.parts[0]! : Buffer.concat(batch.parts, batch.bytes));
  }

  summary(stream: OutputStream): StreamSummary {
    const s = this.streams[stream];
    return {
      bytes: s.total,
      sha256: s.hash.copy().digest('hex'),
      keptBytes: s.keptBytes,
      kept: Buffer.concat(s.kept, s.keptBytes),
      tail: s.tail.bytes(),
    };
  }

  private enqueue(stream: OutputStream, offset: number, data: Buffer): void {
    // A batch holds one stream only, so interleaving across streams keeps its order.
    if (this.pending && this.pending.stream !== stream) this.flush();
    if (!this.pending) this.pending = { stream, offset, parts: [], bytes: 0 };
    this.pending.parts.push(data);
    this.pending.bytes += data.length;
    if (this.pending.bytes >= this.maxBatchBytes) this.flush();
    else if (!this.timer) this.timer = setTimeout(() => this.flush(), this.flushIntervalMs);
  }
}
