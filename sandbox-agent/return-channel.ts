/**
 * The agent's half of the return path: sends events and results to the lease's `returns` queue
 * in the order they were produced. Job ids are deterministic (`ev.<callId>.<attemptId>.<n>`,
 * `res.<callId>`), so a message sent twice is stored once by the queue (docs/DESIGN.md §5).
 */
import type { Queue } from 'bullmq';
import type { EventBody } from '../contract/events.js';
import type { ToolResult } from '../contract/objects.js';
import type { ReturnMessage } from '../contract/queue.js';

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
