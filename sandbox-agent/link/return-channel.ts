/**
 * The agent's half of the return path: appends events, results and artifact chunks to the
 * lease's return stream (`LeaseKeys.returns`, one entry per message, contract/queue.ts) in the
 * order they were produced. Each message carries its deterministic identity (an event's
 * attempt and number, a result's call, a chunk's artifact and index), so one appended twice —
 * ioredis resends a command whose answer a reconnect lost — is ledgered once (docs/DESIGN.md §5).
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { ARTIFACT_CHUNK_BYTES, encodeReturn } from '../../contract/queue.js';
import type { EventBody } from '../../contract/events.js';
import type { ToolResult } from '../../contract/objects.js';
import type { ReturnMessage } from '../../contract/queue.js';

/** Entries allowed to wait in the return stream before an artifact's sender pauses. */
const MAX_WAITING_ENTRIES = 8;
/** How often a paused artifact sender looks at the stream again, ms. */
const BACKLOG_POLL_MS = 20;

/** Where return messages go: the lease's return stream (main.ts binds it to Redis). */
export interface ReturnStream {
  /** Appends one entry (XADD) with these fields; resolves once Redis has it. */
  append(fields: (string | Buffer)[]): Promise<unknown>;
  /** Entries not yet ledgered by the control plane (XLEN: it deletes what it ledgered). */
  backlog(): Promise<number>;
}

/** First and longest pause before a refused append is tried again, ms. */
const APPEND_RETRY_FIRST_MS = 50;
const APPEND_RETRY_MAX_MS = 2000;

export class ReturnChannel {
  private tail: Promise<unknown> = Promise.resolve();

  /** `onRetry`: told of each append Redis refused (LOADING after a restart, OOM), before it is tried again. */
  constructor(
    private readonly stream: ReturnStream,
    private readonly onRetry: (err: unknown) => void = () => undefined,
  ) {}

  /** Opens the event sequence of one attempt. */
  forAttempt(callId: string, attemptId: string): AttemptChannel {
    let n = 0;
    return {
      emit: (body) => {
        n += 1;
        this.send({ kind: 'event', callId, attemptId, n, body });
      },
      result: (result) => this.sendAndWait({ kind: 'result', callId, attemptId, result }),
      detached: (result) => this.send({ kind: 'detached', callId, attemptId, result }),
    };
  }

  /**
   * Sends the file at `path` as artifact `artifactId` in ARTIFACT_CHUNK_BYTES chunks, each with
   * its sha256, then the end message with the whole sha256. Reads one chunk at a time and, when
   * the control plane falls behind, waits for the stream to shrink, so neither the agent's memory
   * nor Redis holds more than a few chunks. Returns the artifact's size and sha256 (hex).
   */
  async sendArtifact(
    callId: string,
    artifactId: string,
    path: string,
    name: string,
    mediaType: string,
  ): Promise<{ size: number; sha256: string }> {
    const whole = createHash('sha256');
    let size = 0;
    let index = 0;
    const file = await open(path, 'r');
    try {
      const buffer = Buffer.alloc(ARTIFACT_CHUNK_BYTES);
      for (;;) {
        const { bytesRead } = await file.read(buffer, 0, ARTIFACT_CHUNK_BYTES, size);
        if (bytesRead === 0) break;
        const chunk = buffer.subarray(0, bytesRead);
        whole.update(chunk);
        // Not copied: the buffer is read into again only once this entry is in Redis (settled).
        this.send({
          kind: 'artifact_chunk',
          callId,
          artifactId,
          index,
          sha256: createHash('sha256').update(chunk).digest('hex'),
          data: chunk,
        });
        await this.settled();
        size += bytesRead;
        index += 1;
        while ((await this.stream.backlog()) > MAX_WAITING_ENTRIES) await new Promise((r) => setTimeout(r, BACKLOG_POLL_MS));
      }
    } finally {
      await file.close();
    }
    const sha256 = whole.digest('hex');
    this.send({ kind: 'artifact_end', callId, artifactId, name, mediaType, size, chunks: index, sha256 });
    await this.settled();
    return { size, sha256 };
  }

  /** Resolves once everything sent so far is in Redis. */
  async settled(): Promise<void> {
    await this.tail;
  }

  /**
   * Chained, not pipelined: each append waits for the previous one, so the stream's order is the
   * production order also when ioredis resends a command after a reconnect. An append Redis
   * refuses (an error reply: the connection itself waits out a disconnect) is tried again until
   * taken, later ones waiting: a message is never skipped, and a passing refusal does not stop
   * the agent's return path for good.
   */
  private send(message: ReturnMessage): void {
    const fields = encodeReturn(message);
    this.tail = this.tail.then(async () => {
      for (let pauseMs = APPEND_RETRY_FIRST_MS; ; pauseMs = Math.min(pauseMs * 2, APPEND_RETRY_MAX_MS)) {
        try {
          await this.stream.append(fields);
          return;
        } catch (err) {
          this.onRetry(err);
          await new Promise((r) => setTimeout(r, pauseMs));
        }
      }
    });
  }

  private async sendAndWait(message: ReturnMessage): Promise<void> {
    this.send(message);
    await this.settled();
  }
}

export interface AttemptChannel {
  emit(body: EventBody): void;
  result(result: ToolResult): Promise<void>;
  /** A background task's handle; ordered with the events around it. */
  detached(result: ToolResult): void;
}
