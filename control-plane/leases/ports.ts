/**
 * Ports the lease domain declares for what it needs from outside: of the calls domain (so
 * leases/ imports nothing of calls/; the composition root hands it the call service) and of
 * the agent link.
 */
import type { AgentAcl } from '../agent-link/acl.js';
import type { CallsOut } from '../agent-link/calls-out.js';
import type { Handshake } from '../agent-link/handshake.js';
import type { Liveness } from '../agent-link/liveness.js';
import type { ReturnsIn } from '../agent-link/returns-in.js';
import type { LeaseRecord } from './store.js';

export interface LeaseCalls {
  /** Ids of the lease's calls that have not finished. */
  openCalls(leaseId: string): Promise<string[]>;
  /** Resolves once none of the lease's calls is open, or at `untilMs` (epoch ms), whichever comes first. */
  waitAllFinished(leaseId: string, untilMs: number): Promise<void>;
  /** Ids of the lease's calls waiting for approval (nothing of them queued). */
  waitingForApproval(leaseId: string): Promise<string[]>;
  /** Ends denied the lease's calls not started yet that name a secret outside `allowed` (a phase or policy change withdrew it); their ids. */
  denyWithdrawnSecrets(leaseId: string, allowed: readonly string[]): Promise<string[]>;
  /** Cancels one call through the normal chain (queued: removed; running: signalled to the agent). */
  cancel(lease: LeaseRecord, callId: string): Promise<unknown>;
  /**
   * Finishes every open call of a lease that is going away (`cancelled` when no attempt
   * started, else `effect_unknown`); `attemptOf` gives the started attempt's id, or null.
   */
  abandonOpenCalls(leaseId: string, manifestDigest: string | null, attemptOf: (callId: string) => Promise<string | null>): Promise<void>;
}

/** The parts of the agent link (agent-link/) the lease lifecycle uses. */
export interface LeaseLink {
  liveness: Pick<Liveness, 'processId' | 'isAlive'>;
  acl: Pick<AgentAcl, 'provision' | 'leases'>;
  handshake: Pick<Handshake, 'awaitHello' | 'bind' | 'leaveSecretDelivery' | 'knownImageFacts' | 'keepImageFacts'>;
  returns: Pick<ReturnsIn, 'start' | 'drain' | 'active'>;
  calls: Pick<CallsOut, 'attemptOf' | 'markWithdrawnSecrets'>;
  /** Stops consuming the lease's returns and forgets its queue handles. */
  stop(leaseId: string): Promise<void>;
  /** Deletes the lease's ACL user and every key of its namespace. */
  destroy(leaseId: string): Promise<void>;
}
