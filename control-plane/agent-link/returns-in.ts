/**
 * What comes back from a lease's agent: its `returns` queue (events, results, artifact chunks),
 * consumed by one BullMQ worker per lease with concurrency 1, so messages are handed on in the
 * order the agent sent them, and by one control-plane process at a time (the consumer lock).
 * The handler is the composition root's: returns meet calls there, not in leases/.
 */
import { Queue, Worker } from 'bullmq';
import type { Redis, RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { RETURN_QUEUE, ReturnMessage, leaseKeys } from '../../contract/queue.js';
import type { RedisLock } from '../redis/lock.js';
import type { Liveness } from './liveness.js';

export type ReturnHandler = (leaseId: string, message: ReturnMessage) => Promise<void>;

/** A consumer lock lives this long without renewal, ms. */
const LOCK_MS = 15_000;
/** Renewal period of consumer locks, ms. */
const RENEW_MS = 5_000;
/** Poll period while draining a return queue, ms (BullMQ has no event for "queue empty"). */
const DRAIN_POLL_MS = 25;

export class ReturnsIn {
  private readonly workers = new Map<string, Worker>();
  private renewer: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly options: RedisOptions,
    private readonly rootPrefix: string,
    private readonly lock: RedisLock,
    private readonly liveness: Pick<Liveness, 'processId' | 'isAlive'>,
    private readonly handler: ReturnHandler,
    private readonly log: Logger,
  ) {}

  /**
   * Starts consuming the lease's return queue, unless another control-plane process does:
   * exactly one process holds a lease's consumer lock (`<prefix>consumer:<leaseId>`, renewed
   * every RENEW_MS, lost after LOCK_MS), so messages are ledgered one at a time in the order the
   * agent sent them — with two consumers, a result could overtake the output events before it.
   * A lock whose holder's liveness key is gone (it crashed) is taken over at once.
   * Idempotent; returns whether this process consumes. Messages that fail the schema are
   * dropped and logged.
   */
  async start(leaseId: string): Promise<boolean> {
    if (this.workers.has(leaseId)) return true;
    const key = this.lockKey(leaseId);
    const me = this.liveness.processId;
    if (!(await this.lock.acquire(key, me, LOCK_MS))) {
      const holder = await this.lock.holder(key);
      // A lock still held by this very process (a stop whose release failed) is this process's.
      const mine = holder === me;
      const orphaned =
        holder !== null && !mine && !(await this.liveness.isAlive(holder)) && (await this.lock.steal(key, holder, me, LOCK_MS));
      if (!mine && !orphaned) return false;
    }
    const worker = new Worker(
      RETURN_QUEUE,
      async (job) => {
        const parsed = ReturnMessage.safeParse(job.data);
        if (!parsed.success) {
          this.log.warn({ sandboxId: leaseId, jobId: job.id, issues: parsed.error.issues }, 'dropped malformed message from sandbox agent');
          return;
        }
        await this.handler(leaseId, parsed.data);
      },
      // Ledgering is idempotent, so a message whose consumer died mid-way is simply taken
      // again: soon (a 10 s lock, checked every 5 s) rather than BullMQ's default 30 s.
      {
        connection: this.options,
        prefix: leaseKeys(this.rootPrefix, leaseId).namespace,
        concurrency: 1,
        lockDuration: 10_000,
        stalledInterval: 5_000,
      },
    );
    worker.on('error', (err) => this.log.warn({ sandboxId: leaseId, err }, 'return worker error'));
    this.workers.set(leaseId, worker);
    this.renewer ??= setInterval(() => void this.renewLocks(), RENEW_MS).unref();
    return true;
  }

  /** Extends this process's consumer locks; a lock found lost (this process was too slow) stops its worker. */
  private async renewLocks(): Promise<void> {
    for (const leaseId of [...this.workers.keys()]) {
      // A Redis error is not a lost lock: try again next round (the lock outlives three of them).
      const held = await this.lock.renew(this.lockKey(leaseId), this.liveness.processId, LOCK_MS).catch(() => null);
      if (held === false) {
        this.log.warn({ sandboxId: leaseId }, 'lost the consumer lock of a lease; another process consumes its returns now');
        await this.stop(leaseId);
      }
    }
  }

  /** Stops consuming and gives up the consumer lock (idempotent). */
  async stop(leaseId: string): Promise<void> {
    const worker = this.workers.get(leaseId);
    this.workers.delete(leaseId);
    if (!worker) return;
    await Promise.allSettled([worker.close()]);
    await this.lock.release(this.lockKey(leaseId), this.liveness.processId).catch(() => undefined);
  }

  /**
   * Waits until the lease's return queue has nothing waiting or in progress (so what the agent
   * sent before it stopped is ledgered, by this process or the one holding the consumer lock),
   * at most `timeoutMs`. No-op when no process consumes the lease's returns.
   */
  async drain(leaseId: string, timeoutMs: number): Promise<void> {
    // Whichever process consumes the returns (the consumer lock's holder), wait for it.
    if (!this.workers.has(leaseId) && !(await this.lock.held(this.lockKey(leaseId)))) return;
    const queue = new Queue(RETURN_QUEUE, { connection: this.redis, prefix: leaseKeys(this.rootPrefix, leaseId).namespace });
    try {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const counts = await queue.getJobCounts('waiting', 'active', 'prioritized', 'delayed');
        if (Object.values(counts).every((n) => n === 0)) return;
        await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
      }
    } finally {
      await queue.close();
    }
  }

  /** Lease ids this process consumes returns for. */
  active(): string[] {
    return [...this.workers.keys()];
  }

  /** Stops every worker and the lock renewal. */
  async close(): Promise<void> {
    if (this.renewer) clearInterval(this.renewer);
    await Promise.allSettled(this.active().map((id) => this.stop(id)));
  }

  private lockKey(leaseId: string): string {
    return `${this.rootPrefix}consumer:${leaseId}`;
  }
}
