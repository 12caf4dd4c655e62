/**
 * Lease expiry: what the lease's durable timer (redis/timers.ts, queue `lease-expiry`) does when
 * it falls due, in whichever control-plane process runs a worker then.
 */
import { TERMINAL_LEASE_STATUSES } from '../../contract/objects.js';
import type { TimerOutcome } from '../redis/timers.js';
import type { LeaseEnder } from './ending.js';
import type { LeaseStore } from './store.js';

/** The queue of the lease expiry timers. */
export const LEASE_EXPIRY_QUEUE = 'lease-expiry';

export class LeaseExpiry {
  constructor(
    private readonly deps: {
      store: Pick<LeaseStore, 'getLease'>;
      ender: Pick<LeaseEnder, 'begin' | 'finish'>;
      now: () => Date;
    },
  ) {}

  /**
   * Expires a ready or paused lease whose `expiresAt` has passed (exactly once across processes: the
   * `ready` → `releasing` compare-and-swap decides), or says when to fire again (renewed, or
   * not ready yet).
   */
  async onTimer(id: string): Promise<TimerOutcome> {
    const lease = await this.deps.store.getLease(id);
    if (!lease || lease.status === 'releasing' || TERMINAL_LEASE_STATUSES.has(lease.status)) return { done: true };
    const nowMs = this.deps.now().getTime();
    const dueMs = Date.parse(lease.expiresAt);
    // Ready or paused (a paused lease's `expiresAt` is the end of its pause budget).
    if (lease.status !== 'ready' && lease.status !== 'paused') return { retryAtMs: Math.max(dueMs, nowMs + 1000) };
    if (dueMs > nowMs) return { retryAtMs: dueMs };
    const begun = await this.deps.ender.begin(id, 'expired', 'system', 0);
    if (begun.applied) await this.deps.ender.finish(begun.lease);
    return { done: true };
  }
}
