/**
 * Durable timers: one BullMQ delayed job per subject (job id = the subject's id, e.g. a lease
 * id) in a control-plane queue of its own (prefix `<rootPrefix>cp`, outside every agent's ACL
 * namespace). The timer lives in Redis, not in a process: whichever control-plane process runs
 * a worker when it falls due handles it, so it fires on time even when the process that set it
 * has died; BullMQ's job lock lets one worker at a time hold a job. The lease expiry
 * (leases/expiry.ts) is the one user: queue `lease-expiry`.
 */
import { DelayedError, Queue, Worker } from 'bullmq';
import type { Logger } from 'pino';
import type { Redis, RedisOptions } from 'ioredis';

/**
 * What the handler of a due timer decides: `done` (no more timer), or the epoch ms to fire
 * again at (e.g. the lease was renewed, or is not ready yet).
 */
export type TimerOutcome = { done: true } | { retryAtMs: number };

export class DurableTimers {
  private readonly queue: Queue;
  private worker: Worker | null = null;

  constructor(
    redis: Redis,
    private readonly options: RedisOptions,
    private readonly rootPrefix: string,
    /** The queue's name, e.g. `lease-expiry`. */
    private readonly name: string,
    private readonly log: Logger,
  ) {
    this.queue = new Queue(name, {
      connection: redis,
      prefix: this.prefix,
      // A failed handler (Redis or Docker hiccup) is tried again; the lease expiry's reconcile
      // also expires what is past due in any case.
      defaultJobOptions: {
        removeOnComplete: true,
        removeOnFail: { age: 24 * 3600 },
        attempts: 5,
        backoff: { type: 'exponential', delay: 1000 },
      },
    });
  }

  private get prefix(): string {
    return `${this.rootPrefix}cp`;
  }

  /**
   * Makes the subject's timer fire at `atMs` (epoch ms): adds it, or moves a waiting one (a
   * renewal). A timer being handled right now is left alone: its handler reads the subject's
   * deadline and sets itself again when that moved.
   */
  async set(id: string, atMs: number): Promise<void> {
    await this.put(id, atMs, true);
  }

  /** Adds the subject's timer for `atMs` unless it has one (reconcile: a timer lost with Redis data comes back). */
  async ensure(id: string, atMs: number): Promise<void> {
    await this.put(id, atMs, false);
  }

  private async put(id: string, atMs: number, move: boolean): Promise<void> {
    const delay = Math.max(0, atMs - Date.now());
    const existing = await this.queue.getJob(id);
    const state = existing ? await existing.getState() : null;
    if (state === 'delayed' && move && delay > 0) return existing!.changeDelay(delay);
    // A job that gave up (failed every attempt) would make `add` a no-op: it goes first.
    if (state === 'failed' || state === 'completed') await existing!.remove().catch(() => undefined);
    // A no-op when a job with this id exists (delayed, waiting or active).
    await this.queue.add('fire', { id }, { jobId: id, delay });
  }

  /** Removes the subject's timer if it is waiting (a timer that is firing finishes by itself). */
  async clear(id: string): Promise<void> {
    const job = await this.queue.getJob(id);
    if (job && (await job.getState()) === 'delayed') await job.remove().catch(() => undefined);
  }

  /** Starts this process's worker: `handler(id)` runs for each timer that falls due. Idempotent. */
  start(handler: (id: string) => Promise<TimerOutcome>): void {
    if (this.worker) return;
    this.worker = new Worker(
      this.name,
      async (job, token) => {
        // `leaseId`: the field of timers set before the queue was generic.
        const data = job.data as { id?: string; leaseId?: string };
        const outcome = await handler(String(data.id ?? data.leaseId));
        if ('retryAtMs' in outcome) {
          // The same job waits again (BullMQ's way of re-delaying a job from its processor).
          await job.moveToDelayed(outcome.retryAtMs, token);
          throw new DelayedError();
        }
      },
      { connection: this.options, prefix: this.prefix, concurrency: 4 },
    );
    this.worker.on('error', (err) => this.log.warn({ err, queue: this.name }, 'timer worker error'));
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.worker?.close(), this.queue.close()]);
  }
}
