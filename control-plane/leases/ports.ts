/**
 * What the lease domain needs from the calls domain, declared here (the consumer's port) so
 * leases/ imports nothing of calls/; the composition root hands it the call service.
 */
import type { LeaseRecord } from './store.js';

export interface LeaseCalls {
  /** Ids of the lease's calls that have not finished. */
  openCalls(leaseId: string): Promise<string[]>;
  /** Resolves once none of the lease's calls is open, or at `untilMs` (epoch ms), whichever comes first. */
  waitAllFinished(leaseId: string, untilMs: number): Promise<void>;
  /** Cancels one call through the normal chain (queued: removed; running: signalled to the agent). */
  cancel(lease: LeaseRecord, callId: string): Promise<unknown>;
  /**
   * Finishes every open call of a lease that is going away (`cancelled` when no attempt
   * started, else `effect_unknown`); `attemptOf` gives the started attempt's id, or null.
   */
  abandonOpenCalls(leaseId: string, manifestDigest: string | null, attemptOf: (callId: string) => Promise<string | null>): Promise<void>;
}
