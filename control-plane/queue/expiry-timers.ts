/**
 * Durable lease expiry timers: one BullMQ delayed job per lease (job id = the lease id) in the
 * control plane's own queue `lease-expiry` (prefix `<rootPrefix>cp`, outside every agent's ACL
 * namespace). The timer lives in Redis, not in a process: whichever control-plane process runs
 * a worker when it falls due handles it, so a lease expires on time even when the process that
 * made it has died; BullMQ's job lock lets one worker at a time hold a job, and the lease
 * service's compare-and-swap on the lease record makes the expiry itself happen once.
 */
import { DelayedError, Queue, Worker } from 'bullmq';
import type { Logger } from 'pino';
import type { Redis, RedisOptions } from './redis.js';

const QUEUE = 'lease-expiry';

/**
 * What the handler of a due timer decides: `done` (the lease expired, or no longer needs a
 * timer), or the epoch ms to fire again at (the lease was renewed, or is not ready yet).
 */
export type ExpiryOutcome = { done: true } | { retryAtMs: number };

export class ExpiryTimers {
  private readonly queue: Queue;
  private worker: Worker | null = null;

  constructor(
    redis: Redis,
    private readonly options: RedisOptions,
    private readonly rootPrefix: string,
    private readonly log: Logger,
  ) {
    this.queue = new Queue(QUEUE, {
      connection: redis,
      prefix: this.prefix,
      // A failed expiry (Redis or Docker hiccup) is tried again; reconcile expires what is
      // past due in any case.
      defaultJobOptions: { removeOnComplete: true, removeOnFail: { age: 24 * 3600 }, attempts: 5, backoff: { type: 'exponential', delay: 1000 } },
    });
  }

  private get prefix(): string {
    return `${this.rootPrefix}cp`;
  }

  /**
   * Makes the lease's timer fire at `atMs` (epoch ms): adds it, or moves a waiting one (a
   * renewal). A timer being handled right now is left alone: its handler reads the lease's
   * `expiresAt` and sets itself again when that moved.
   */
  async set(leaseId: string, atMs: number): Promise<void> {
    await this.put(leaseId, atMs, true);
  }

  /** Adds the lease's timer for `atMs` unless it has one (reconcile: a timer lost with Redis data comes back). */
  async ensure(leaseId: string, atMs: number): Promise<void> {
    await this.put(leaseId, atMs, false);
  }

  private async put(leaseId: string, atMs: number, move: boolean): Promise<void> {
    const delay = Math.max(0, atMs - Date.now());
    const existing = await this.queue.getJob(leaseId);
    const state = existing ? await existing.getState() : null;
    if (state === 'delayed' && move && delay > 0) return existing!.changeDelay(delay);
    // A job that gave up (failed every attempt) would make `add` a no-op: it goes first.
    if (state === 'failed' || state === 'completed') await existing!.remove().catch(() => undefined);
    // A no-op when a job with this id exists (delayed, waiting or active).
    await this.queue.add('expire', { leaseId }, { jobId: leaseId, delay });
  }

  /** Removes the lease's timer if it is waiting (a timer that is firing finishes by itself). */
  async clear(leaseId: string): Promise<void> {
    const job = await this.queue.getJob(leaseId);
    if (job && (await job.getState()) === 'delayed') await job.remove().catch(() => undefined);
  }

  /** Starts this process's worker: `handler(leaseId)` runs for each timer that falls due. Idempotent. */
  start(handler: (leaseId: string) => Promise<ExpiryOutcome>): void {
    if (this.worker) return;
    this.worker = new Worker(
      QUEUE,
      async (job, token) => {
        const outcome = await handler(String(job.data.leaseId));
        if ('retryAtMs' in outcome) {
          // The same job waits again (BullMQ's way of re-delaying a job from its processor).
          await job.moveToDelayed(outcome.retryAtMs, token);
          throw new DelayedError();
        }
      },
      { connection: this.options, prefix: this.prefix, concurrency: 4 },
    );
    this.worker.on('error', (err) => this.log.warn({ err }, 'expiry worker error'));
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.worker?.close(), this.queue.close()]);
  }
}
