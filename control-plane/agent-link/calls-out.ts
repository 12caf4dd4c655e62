/**
 * What goes from the control plane to a lease's agent: the `calls` queue it consumes (calls,
 * and the binding of a pooled sandbox), cancel markers and the `control` channel. Also reads
 * the agent's durable attempt markers and the queues' depth.
 */
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { BIND_JOB, CALL_QUEUE, leaseKeys, type CallJob, type ControlMessage, type LeaseBinding } from '../../contract/queue.js';

export class CallsOut {
  private readonly queues = new Map<string, Queue>();

  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  /** Adds a call to the lease's queue; the job id is the callId, so a second add is a no-op. */
  async enqueue(leaseId: string, job: CallJob): Promise<void> {
    await this.queue(leaseId).add(job.tool, job, { jobId: job.callId });
  }

  /** Adds a pooled sandbox's binding (job `BIND_JOB`, removed once taken so no call id can ever collide with it). */
  async sendBinding(leaseId: string, binding: LeaseBinding): Promise<void> {
    await this.queue(leaseId).add(BIND_JOB, binding, { jobId: BIND_JOB, removeOnComplete: true, removeOnFail: true });
  }

  /** Removes a call that no agent has taken yet. True when it was removed before it started. */
  async removeQueued(leaseId: string, callId: string): Promise<boolean> {
    const job = await this.queue(leaseId).getJob(callId);
    if (!job) return false;
    const state = await job.getState();
    if (state !== 'waiting' && state !== 'delayed' && state !== 'prioritized') return false;
    try {
      await job.remove();
      return true;
    } catch {
      // The agent took it between getState and remove (the job is locked): it is running now.
      return false;
    }
  }

  /**
   * Takes a call's job back unless an agent took it: `absent` (no job: the add never reached
   * Redis), `removed` (it was waiting and is gone now), `taken` (an agent has it: it runs).
   */
  async takeBack(leaseId: string, callId: string): Promise<'absent' | 'removed' | 'taken'> {
    if (await this.removeQueued(leaseId, callId)) return 'removed';
    return (await this.queue(leaseId).getJob(callId)) ? 'taken' : 'absent';
  }

  /**
   * Tells the agent to cancel a call: a durable marker the agent checks before it starts the
   * call (so a cancel that races the start is not lost), then a message for a running one.
   */
  async requestCancel(leaseId: string, callId: string): Promise<void> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    const message: ControlMessage = { type: 'cancel', callId };
    await this.redis
      .multi()
      .set(keys.cancel(callId), '1', 'EX', 24 * 3600)
      .publish(keys.control, JSON.stringify(message))
      .exec();
  }

  /** Publishes `message` on the lease's `control` channel (best effort: only a listening agent gets it), e.g. a preview's `preview_open`. */
  async signal(leaseId: string, message: ControlMessage): Promise<void> {
    await this.redis.publish(leaseKeys(this.rootPrefix, leaseId).control, JSON.stringify(message));
  }

  /** The id of the call's attempt the agent recorded as started (its durable marker), or null. */
  async attemptOf(leaseId: string, callId: string): Promise<string | null> {
    return this.redis.get(leaseKeys(this.rootPrefix, leaseId).attempt(callId));
  }

  /**
   * Jobs on the call queues of `leaseIds`, summed: `waiting` (waiting, prioritized, delayed:
   * not taken by the agent yet) and `active` (taken by the agent). Reads the queues in Redis,
   * so it counts every lease's, whichever process produced its calls.
   */
  async depth(leaseIds: readonly string[]): Promise<{ waiting: number; active: number }> {
    const depth = { waiting: 0, active: 0 };
    for (const leaseId of leaseIds) {
      // A throwaway handle, not queue()'s cache: most of these leases are not this process's to keep queues for.
      const queue = new Queue(CALL_QUEUE, { connection: this.redis, prefix: leaseKeys(this.rootPrefix, leaseId).namespace });
      try {
        const counts = await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active');
        depth.waiting += (counts.waiting ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
        depth.active += counts.active ?? 0;
      } finally {
        await queue.close();
      }
    }
    return depth;
  }

  /** Closes and forgets the lease's queue handle (idempotent). */
  async forget(leaseId: string): Promise<void> {
    const queue = this.queues.get(leaseId);
    this.queues.delete(leaseId);
    await queue?.close();
  }

  /** Lease ids this process holds a queue handle for. */
  held(): string[] {
    return [...this.queues.keys()];
  }

  private queue(leaseId: string): Queue {
    let queue = this.queues.get(leaseId);
    if (!queue) {
      queue = new Queue(CALL_QUEUE, {
        connection: this.redis,
        prefix: leaseKeys(this.rootPrefix, leaseId).namespace,
        defaultJobOptions: { removeOnComplete: { age: 24 * 3600 }, removeOnFail: { age: 24 * 3600 } },
      });
      this.queues.set(leaseId, queue);
    }
    return queue;
  }
}
