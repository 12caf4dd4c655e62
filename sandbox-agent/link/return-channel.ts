/**
 * The agent's half of the return path: sends events and results to the lease's `returns` queue
 * in the order they were produced. Job ids are deterministic (`ev.<callId>.<attemptId>.<n>`,
 * `res.<callId>`), so a message sent twice is stored once by the queue (docs/DESIGN.md §5).
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import type { Queue } from 'bullmq';
import { ARTIFACT_CHUNK_BYTES } from '../../contract/queue.js';
import type { EventBody } from '../../contract/events.js';
import type { ToolResult } from '../../contract/objects.js';
import type { ReturnMessage } from '../../contract/queue.js';

/** Artifact chunks allowed to wait in the return queue before the sender pauses. */
const MAX_WAITING_CHUNKS = 8;

export class ReturnChannel {
  private tail: Promise<unknown> = Promise.resolve();
  private failure: unknown = null;

  constructor(private readonly queue: Queue) {}

  /** Opens the event sequence of one attempt. */
  forAttempt(callId: string, attemptId: string): AttemptChannel {
    let n = 0;
    return {
      emit: (body) => {
        n += 1;
        this.send({ kind: 'event', callId, attemptId, n, body }, `ev.${callId}.${attemptId}.${n}`);
      },
      result: (result) => this.sendAndWait({ kind: 'result', callId, attemptId, result }, `res.${callId}`),
      detached: (result) => this.send({ kind: 'detached', callId, attemptId, result }, `det.${callId}`),
    };
  }

  /**
   * Sends the file at `path` as artifact `artifactId` in ARTIFACT_CHUNK_BYTES chunks, each with
   * its sha256, then the end message with the whole sha256. Reads one chunk at a time and, when
   * the control plane falls behind, waits for the queue to shrink, so neither the agent's memory
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
        const message: ReturnMessage = {
          kind: 'artifact_chunk',
          callId,
          artifactId,
          index,
          sha256: createHash('sha256').update(chunk).digest('hex'),
          dataBase64: chunk.toString('base64'),
        };
        this.send(message, `art.${artifactId}.${index}`);
        await this.settled();
        size += bytesRead;
        index += 1;
        while ((await this.queue.getWaitingCount()) > MAX_WAITING_CHUNKS) await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      await file.close();
    }
    const sha256 = whole.digest('hex');
    this.send({ kind: 'artifact_end', callId, artifactId, name, mediaType, size, chunks: index, sha256 }, `art.${artifactId}.end`);
    await this.settled();
    return { size, sha256 };
  }

  /** Resolves once everything sent so far is in Redis; rejects with the first send failure. */
  async settled(): Promise<void> {
    await this.tail;
    if (this.failure) throw this.failure;
  }

  private send(message: ReturnMessage, jobId: string): void {
    // Chained, not pipelined: each add waits for the previous one, so the queue's FIFO order is
    // the production order even when a send is retried by ioredis.
    this.tail = this.tail.then(() =>
      this.queue.add(message.kind, message, { jobId }).catch((err: unknown) => {
        this.failure ??= err;
      }),
    );
  }

  private async sendAndWait(message: ReturnMessage, jobId: string): Promise<void> {
    this.send(message, jobId);
    await this.settled();
  }
}

export interface AttemptChannel {
  emit(body: EventBody): void;
  result(result: ToolResult): Promise<void>;
  /** A background task's handle; ordered with the events around it. */
  detached(result: ToolResult): void;
}
