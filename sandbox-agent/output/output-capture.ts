/**
 * The capture of one attempt's output, the one way exec, session commands and terminals keep
 * what a program writes. Every byte is redacted first (output/redactor.ts), then counted, hashed
 * and kept up to `maxOutputBytes` as ordered `output` events (output/output-pipeline.ts), and
 * spooled to a file up to the spool cap (output/spool.ts), pausing its source while the spool's
 * buffer is full.
 *
 * When the program is done, `finish` turns each spool into the outcome's fields: a stream the
 * result holds whole leaves no artifact (unless `keepArtifact: 'always'`), a stream cut at the
 * bound goes whole (up to the spool cap) to an artifact with sha256 (the spool file itself is
 * offered, no copy; its sha256 is the stream's, or read back only when the spool was cut), and the result says so
 * explicitly (`truncation`: `originalBytes`, `keptBytes`, `fullArtifact`, `artifactTruncated`).
 */
import { bytesPassed } from './buffer-reclaim.js';
import type { OutputStream } from '../../contract/events.js';
import type { StreamTruncation } from '../../contract/objects.js';
import type { AttemptContext, AttemptOutcome } from '../execution/attempt.js';
import type { StreamRedactor } from './redactor.js';
import { OutputPipeline, type OutputPipelineOptions, type StreamSummary } from './output-pipeline.js';
import { StreamSpool } from './spool.js';

/** What a capture takes of the attempt's context. */
export type CaptureContext = Pick<AttemptContext, 'attemptId' | 'maxOutputBytes' | 'spool' | 'secrets' | 'emit' | 'offerArtifact'>;

export interface OutputCaptureOptions {
  /** The streams the program writes (a terminal writes stdout only; the other is reported empty). */
  streams: readonly OutputStream[];
  /** stdout and stderr are one stream (`combinedOutput`): the events and the receipt say `combined: true`. */
  combined?: boolean;
  /** Batching of the `output` events (default the pipeline's: 64 KiB, 20 ms). */
  batching?: Pick<OutputPipelineOptions, 'maxBatchBytes' | 'flushIntervalMs'>;
  /**
   * A stream's name for its spool file (`<attemptId>.<name>`) and its artifact (`<name>.log`);
   * default the stream's own (`stdout`, `stderr`).
   */
  names?: Partial<Record<OutputStream, string>>;
  /** `when_truncated` (default): an artifact only of a stream the result holds less of; `always`: of every stream (a transcript). */
  keepArtifact?: 'when_truncated' | 'always';
  /** Called with each non-empty redacted chunk `write` takes, before it is counted (a terminal's live channel). */
  onRedacted?: (stream: OutputStream, data: Buffer) => void;
}

/** Anything a capture can pause while its spool drains (a pipe, a pty). */
export interface PausableSource {
  pause(): void;
  resume(): void;
}

/** What became of one stream's spool. */
export interface StreamArtifact {
  artifact: { id: string; sha256: string; size: number };
  /** True when even the spool was cut at its cap (the artifact holds less than the stream). */
  spoolTruncated: boolean;
}

/** The captured output once the program is done. */
export interface CapturedOutput {
  /** Count, sha256, kept bytes and tail of each stream (empty for a stream not captured). */
  summaries: Record<OutputStream, StreamSummary>;
  /** The artifact each stream became, if any. */
  artifactOf: Partial<Record<OutputStream, StreamArtifact>>;
  /** The outcome's output fields: receipt `outputs`, the kept text, the explicit truncation, the artifacts. */
  fields: Pick<AttemptOutcome, 'outputs' | 'stdout' | 'stderr' | 'truncation'> & { artifacts: NonNullable<AttemptOutcome['artifacts']> };
}

export class OutputCapture {
  private readonly pipeline: OutputPipeline;
  private readonly spools: Partial<Record<OutputStream, StreamSpool>> = {};
  private readonly redactors: Partial<Record<OutputStream, StreamRedactor>> = {};
  /** Streams whose spool was offered as an artifact: the shelf, not `discard`, removes it. */
  private readonly offered = new Set<OutputStream>();

  /** Opens the spool of every stream: call `finish` or `discard` once, or their files stay. */
  constructor(
    private readonly ctx: CaptureContext,
    private readonly options: OutputCaptureOptions,
  ) {
    const mark = options.combined ? { combined: true as const } : {};
    this.pipeline = new OutputPipeline(
      {
        chunk: (stream, offset, data) => ctx.emit({ type: 'output', stream, offset, dataBase64: data.toString('base64'), ...mark }),
        truncated: (stream, keptBytes) => ctx.emit({ type: 'output.truncated', stream, keptBytes, ...mark }),
      },
      { maxKeptBytes: ctx.maxOutputBytes, ...options.batching },
    );
    for (const stream of options.streams) {
      this.spools[stream] = new StreamSpool(
        ctx.spool.dir,
        `${ctx.attemptId}.${this.nameOf(stream)}`,
        ctx.spool.maxArtifactBytes,
        ctx.spool.budget,
      );
      this.redactors[stream] = ctx.secrets.redaction.stream();
    }
  }

  /**
   * Takes bytes the program wrote to `stream` (before redaction). False when the spool's buffer
   * is full: the caller waits for `onDrain`; with `source`, it is paused here and resumed then.
   */
  write(stream: OutputStream, raw: Buffer, source?: PausableSource): boolean {
    bytesPassed(raw.length);
    const data = this.redactors[stream]!.push(raw);
    if (data.length > 0) this.options.onRedacted?.(stream, data);
    const more = this.forward(stream, data);
    if (!more && source) {
      source.pause();
      this.onDrain(stream, () => source.resume());
    }
    return more;
  }

  /** Calls `resume` once the spool of `stream` has room again. */
  onDrain(stream: OutputStream, resume: () => void): void {
    this.spools[stream]!.onDrain(resume);
  }

  /**
   * Ends the capture once the program's streams have closed: what the redactors held back is
   * passed on, the last events are emitted, and every spool becomes an artifact or goes (the
   * spools are removed whatever happens). Rejects when an upload fails.
   */
  async finish(): Promise<CapturedOutput> {
    const streams = this.options.streams;
    for (const stream of streams) this.forward(stream, this.redactors[stream]!.end());
    this.pipeline.flush();
    const summaries = { stdout: this.pipeline.summary('stdout'), stderr: this.pipeline.summary('stderr') };
    const artifactOf: CapturedOutput['artifactOf'] = {};
    const truncation: Record<OutputStream, StreamTruncation | null> = { stdout: null, stderr: null };
    try {
      await Promise.all(streams.map((stream) => this.spools[stream]!.close()));
      for (const stream of streams) {
        const summary = summaries[stream];
        const cut = summary.keptBytes < summary.bytes;
        if (!cut && this.options.keepArtifact !== 'always') continue;
        const spool = this.spools[stream]!;
        await spool.persist();
        // The spool is the artifact's file now: the shelf removes it once the control plane has it.
        this.offered.add(stream);
        // An uncut spool holds exactly the stream the pipeline hashed: its digest is the stream's.
        const sha256 = spool.truncated ? await spool.sha256() : summary.sha256;
        const file = { path: spool.path, release: () => spool.remove(), digest: { size: spool.bytes, sha256 } };
        const kept = {
          artifact: await this.ctx.offerArtifact(file, `${this.nameOf(stream)}.log`, 'application/octet-stream'),
          spoolTruncated: spool.truncated,
        };
        artifactOf[stream] = kept;
        if (cut) truncation[stream] = truncationOf(summary, kept);
      }
    } finally {
      await this.discard();
    }
    const { stdout: out, stderr: err } = summaries;
    return {
      summaries,
      artifactOf,
      fields: {
        outputs: {
          stdout: { bytes: out.bytes, sha256: out.sha256, keptBytes: out.keptBytes },
          stderr: { bytes: err.bytes, sha256: err.sha256, keptBytes: err.keptBytes },
          ...(this.options.combined ? { combined: true } : {}),
        },
        stdout: out.kept.toString('utf8'),
        stderr: err.kept.toString('utf8'),
        truncation: truncation.stdout || truncation.stderr ? truncation : null,
        artifacts: streams.flatMap((stream) => (artifactOf[stream] ? [artifactOf[stream].artifact] : [])),
      },
    };
  }

  /**
   * Removes every spool file not offered as an artifact and gives its bytes back to the budget (a
   * program that never ran; the end of `finish`).
   */
  async discard(): Promise<void> {
    await Promise.all(this.options.streams.filter((stream) => !this.offered.has(stream)).map((stream) => this.spools[stream]!.remove()));
  }

  /** Passes redacted bytes on; false when the spool wants its source paused. */
  private forward(stream: OutputStream, data: Buffer): boolean {
    if (data.length === 0) return true;
    this.pipeline.write(stream, data);
    return this.spools[stream]!.write(data);
  }

  private nameOf(stream: OutputStream): string {
    return this.options.names?.[stream] ?? stream;
  }
}

/** The explicit truncation of a stream the result holds `keptBytes` of: the whole went to `kept`'s artifact. */
function truncationOf(summary: StreamSummary, kept: StreamArtifact): StreamTruncation {
  return {
    truncated: true,
    originalBytes: summary.bytes,
    keptBytes: summary.keptBytes,
    strategy: 'head',
    fullArtifact: kept.artifact.id,
    artifactTruncated: kept.spoolTruncated,
  };
}
