/**
 * What goes from the control plane to a lease's agent: the `inbox` stream it reads (calls, and
 * the binding of a pooled sandbox; contract/queue.ts), cancel markers and the `control`
 * channel. Also reads the agent's durable attempt markers and the inboxes' depth.
 *
 * Each step on a call's path is one round trip: the add (duplicate check and XADD) and the take
 * back (state check and mark) are one Lua script each.
 */
import type { Redis } from 'ioredis';
import { INBOX_FIELDS, INBOX_GROUP, leaseKeys, type CallJob, type ControlMessage, type LeaseBinding } from '../../contract/queue.js';

/**
 * KEYS[1] the inbox, KEYS[2] the call's queued marker; ARGV[1] the CallJob JSON. 1: added, 0:
 * added before. The marker has no expiry, like the attempt marker: an entry may wait unread
 * behind long calls for any time, and its take-back must hold until it is read; the lease's
 * keys go with the lease.
 */
const ENQUEUE = `
if not redis.call('SET', KEYS[2], 'waiting', 'NX') then return 0 end
redis.call('XADD', KEYS[1], '*', '${INBOX_FIELDS.kind}', 'call', '${INBOX_FIELDS.message}', ARGV[1])
return 1`;

/**
 * KEYS[1] the call's queued marker, KEYS[2] its attempt marker. `absent` (never added; the
 * marker is set to `removed`, so an add that comes later is a no-op), `removed` (taken back now
 * or before), `taken` (an attempt began: it runs).
 */
const TAKE_BACK = `
local state = redis.call('GET', KEYS[1])
if not state then
  redis.call('SET', KEYS[1], 'removed')
  return 'absent'
end
if state == 'removed' then return 'removed' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'taken' end
redis.call('SET', KEYS[1], 'removed')
return 'removed'`;

export class CallsOut {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  /** Adds a call to the lease's inbox, once per callId: a second add is a no-op. */
  async enqueue(leaseId: string, job: CallJob): Promise<void> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    await this.redis.eval(ENQUEUE, 2, keys.inbox, keys.queued(job.callId), JSON.stringify(job));
  }

  /** Adds a pooled sandbox's binding to its inbox (before any call: nothing is submitted before the lease exists). */
  async sendBinding(leaseId: string, binding: LeaseBinding): Promise<void> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    await this.redis.xadd(keys.inbox, '*', INBOX_FIELDS.kind, 'bind', INBOX_FIELDS.message, JSON.stringify(binding));
  }

  /**
   * Takes a call back unless an attempt of it began: `absent` (the add had not reached Redis,
   * and a later add of it is a no-op: a submission still on its way cannot queue it), `removed`
   * (no attempt began and none will: the agent skips its entry), `taken` (it runs).
   */
  async takeBack(leaseId: string, callId: string): Promise<'absent' | 'removed' | 'taken'> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    return (await this.redis.eval(TAKE_BACK, 2, keys.queued(callId), keys.attempt(callId))) as 'absent' | 'removed' | 'taken';
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

  /**
   * Records which of the lease's granted secrets its policy or phase no longer allows (replacing
   * what was recorded): the agent starts no attempt of a call naming one (sandbox-agent/link/attempt-start.ts).
   */
  async markWithdrawnSecrets(leaseId: string, names: readonly string[]): Promise<void> {
    const key = leaseKeys(this.rootPrefix, leaseId).withdrawn;
    const multi = this.redis.multi().del(key);
    if (names.length > 0) multi.sadd(key, ...names);
    await multi.exec();
  }

  /** The id of the call's attempt the agent recorded as started (its durable marker), or null. */
  async attemptOf(leaseId: string, callId: string): Promise<string | null> {
    return this.redis.get(leaseKeys(this.rootPrefix, leaseId).attempt(callId));
  }

  /**
   * Entries in the inboxes of `leaseIds`, summed: `waiting` (not handed to the agent yet) and
   * `active` (handed to it and not acknowledged: running, or waiting for their turn in the
   * agent). A call taken back stays counted as waiting until the agent skips its entry. Reads
   * Redis, so it counts every lease's, whichever process submitted the calls.
   */
  async depth(leaseIds: readonly string[]): Promise<{ waiting: number; active: number }> {
    const depth = { waiting: 0, active: 0 };
    if (leaseIds.length === 0) return depth;
    const pipeline = this.redis.pipeline();
    for (const leaseId of leaseIds) {
      const inbox = leaseKeys(this.rootPrefix, leaseId).inbox;
      pipeline.xlen(inbox).xpending(inbox, INBOX_GROUP);
    }
    const replies = (await pipeline.exec()) ?? [];
    for (let i = 0; i < replies.length; i += 2) {
      const [lenErr, length] = replies[i]!;
      // No group yet (NOGROUP): the agent has not started reading, so nothing is active.
      const [, pending] = replies[i + 1]!;
      const total = lenErr ? 0 : Number(length);
      const active = Array.isArray(pending) ? Number(pending[0] ?? 0) : 0;
      depth.active += active;
      depth.waiting += Math.max(0, total - active);
    }
    return depth;
  }
}
