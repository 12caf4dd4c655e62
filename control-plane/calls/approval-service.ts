/**
 * Tool approvals (issue 16 part 6): a call the policy's rules `ask` about waits
 * (`pending_approval`, nothing queued) until a key with the `approver` or `admin` role approves
 * it — then it is queued as the effect that was approved (CallService.runApproved) — or denies
 * it, or its deadline passes (`denied`, `approval.expired`). Each step is a compare-and-swap on
 * the call's status, so of an approval, a denial and an expiry racing, one wins; each is audited.
 */
import { AppError, errorInfo } from '../../contract/errors.js';
import type { CallView } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import type { CallLease, CallService } from './service.js';
import type { CallStore } from './store.js';

export interface ApprovalServiceDeps {
  calls: Pick<CallService, 'get' | 'runApproved' | 'endWaiting'>;
  store: Pick<CallStore, 'approveCall' | 'appendEvent' | 'readEvents' | 'dueApprovals' | 'forgetApproval' | 'pendingApprovals' | 'getCall'>;
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
}

/**
 * A call waiting for approval as `GET /v1/approvals` lists it: what would run (tool, args,
 * fingerprint), which rule asked, and until when (`expiresAt`; past it the call ends denied).
 * String arguments longer than ARG_PREVIEW_CHARS are cut to that (named in `truncatedArgs`);
 * `GET /v1/sandboxes/:id/calls/:callId` has them whole.
 */
export interface PendingApproval {
  sandboxId: string;
  callId: string;
  tool: string;
  args: Record<string, unknown>;
  truncatedArgs: string[];
  fingerprint: string;
  /** The policy rule that asked, e.g. `tools.approvals.rules[0]`. */
  rule: string;
  createdAt: string;
  expiresAt: string;
}

/** Characters of one string argument a listed approval shows (a `write_file` content can be 32 MiB). */
export const ARG_PREVIEW_CHARS = 2048;
/** Calls one listing shows at most (soonest deadline first), and how many it reads from Redis at a time. */
const PENDING_LISTED = 500;
const PENDING_PAGE = 500;

export class ApprovalService {
  constructor(private readonly deps: ApprovalServiceDeps) {}

  /**
   * The calls waiting for approval that `visible` lets the caller see (its tenant's; an admin's:
   * all), soonest deadline first, at most 500. Throws `auth.approver_required` unless `by` may approve.
   */
  async listPending(by: Principal, visible: (leaseId: string) => Promise<boolean>): Promise<PendingApproval[]> {
    mayApprove(by, 'listing calls waiting for approval');
    const { store } = this.deps;
    const listed: PendingApproval[] = [];
    const seen = new Map<string, boolean>();
    // Paged through every tenant's waiting calls until PENDING_LISTED visible ones: another
    // tenant's many never hide this one's.
    for (let offset = 0; listed.length < PENDING_LISTED; offset += PENDING_PAGE) {
      const page = await store.pendingApprovals(offset, PENDING_PAGE);
      for (const entry of page) {
        if (listed.length >= PENDING_LISTED) break;
        if (!seen.has(entry.leaseId)) seen.set(entry.leaseId, await visible(entry.leaseId));
        if (seen.get(entry.leaseId)) {
          const item = await this.describePending(entry.leaseId, entry.callId, entry.expiresAtMs);
          if (item) listed.push(item);
        }
      }
      if (page.length < PENDING_PAGE) break;
    }
    return listed;
  }

  /** A waiting call as the list shows it; null when it waits no more. */
  private async describePending(leaseId: string, callId: string, expiresAtMs: number): Promise<PendingApproval | null> {
    const { store } = this.deps;
    const call = await store.getCall(leaseId, callId);
    // Approved, denied or expired since it was listed (the sweep takes it off).
    if (call?.status !== 'pending_approval') return null;
    const asked = (await store.readEvents(leaseId, callId)).find((e) => e.type === 'call.pending_approval');
    const { args, truncated } = previewArgs(call.args);
    return {
      sandboxId: leaseId,
      callId,
      tool: call.tool,
      args,
      truncatedArgs: truncated,
      fingerprint: call.fingerprint,
      rule: asked?.type === 'call.pending_approval' ? asked.rule : '',
      createdAt: call.createdAt,
      expiresAt: new Date(expiresAtMs).toISOString(),
    };
  }

  /**
   * Approves a waiting call; it is queued. Idempotent (a call approved before is answered as it
   * is). Throws `auth.approver_required`, `call.not_found`, `approval.expired` (the deadline
   * passed: the call ends denied), `approval.not_pending` (`details.status`).
   */
  async approve(lease: CallLease, callId: string, by: Principal): Promise<CallView> {
    mayApprove(by);
    const { store, calls, now } = this.deps;
    const verdict = await store.approveCall(lease.id, callId, now().getTime());
    if (verdict === '') throw new AppError('call.not_found', `no call ${callId} in sandbox ${lease.id}`, { details: { callId } });
    if (verdict === 'expired') {
      await this.expire(lease.id, callId);
      throw new AppError('approval.expired', `call ${callId} waited for approval past its deadline; it ended denied`, {
        details: { callId },
      });
    }
    if (verdict !== 'approved') {
      if (await this.approvedBefore(lease.id, callId)) {
        // Approved, and still queued: its job may never have been added (a crash right after the
        // approval). Adding it again is a no-op when it was (once per callId).
        if (verdict === 'queued') await calls.runApproved(lease, await calls.get(lease.id, callId));
        return calls.get(lease.id, callId);
      }
      const ended = await calls.get(lease.id, callId);
      if (ended.result?.error?.code === 'approval.expired')
        throw new AppError('approval.expired', `call ${callId} waited for approval past its deadline; it ended denied`, {
          details: { callId },
        });
      throw new AppError('approval.not_pending', `call ${callId} does not wait for approval (${verdict})`, {
        details: { callId, status: verdict },
      });
    }
    await store.appendEvent(lease.id, callId, { type: 'call.approved', by: by.keyId }, now(), 'approved');
    const call = await calls.get(lease.id, callId);
    await this.audited(by, 'call.approve', lease.id, call);
    await calls.runApproved(lease, call);
    return calls.get(lease.id, callId);
  }

  /**
   * Denies a waiting call: it ends `denied` (`approval.denied`), nothing ran. Idempotent (a call
   * denied before is answered as it is). Throws `auth.approver_required`, `call.not_found`,
   * `approval.not_pending`.
   */
  async deny(lease: CallLease, callId: string, by: Principal): Promise<CallView> {
    mayApprove(by);
    const { calls } = this.deps;
    const error = errorInfo('approval.denied', `an approver (${by.keyId}) denied the call; nothing ran`, { by: by.keyId });
    if (await calls.endWaiting(lease.id, callId, error)) {
      const call = await calls.get(lease.id, callId);
      await this.audited(by, 'call.deny', lease.id, call);
      return call;
    }
    const call = await calls.get(lease.id, callId);
    if (call.result?.error?.code === 'approval.denied') return call;
    throw new AppError('approval.not_pending', `call ${callId} does not wait for approval (${call.status})`, {
      details: { callId, status: call.status },
    });
  }

  /** Ends every call whose approval deadline passed (a background task; the expired approval of one call is also seen at once by `approve`). */
  async expireDue(): Promise<number> {
    let ended = 0;
    for (const { leaseId, callId } of await this.deps.store.dueApprovals(this.deps.now().getTime())) {
      if (await this.expire(leaseId, callId)) ended += 1;
      // Waiting no more (approved, denied, cancelled, gone): off the list, so it never blocks the sweep.
      else await this.deps.store.forgetApproval(leaseId, callId);
    }
    return ended;
  }

  private async expire(leaseId: string, callId: string): Promise<boolean> {
    const error = errorInfo('approval.expired', 'nobody approved the call before its deadline; nothing ran');
    if (!(await this.deps.calls.endWaiting(leaseId, callId, error))) return false;
    const call = await this.deps.calls.get(leaseId, callId);
    await this.audited('system', 'call.approval_expired', leaseId, call);
    return true;
  }

  private async approvedBefore(leaseId: string, callId: string): Promise<boolean> {
    return (await this.deps.store.readEvents(leaseId, callId)).some((e) => e.type === 'call.approved');
  }

  private async audited(by: Principal | 'system', action: string, leaseId: string, call: CallView): Promise<void> {
    await this.deps.audit.record({
      actor: by === 'system' ? 'system' : actorOf(by),
      action,
      target: `call:${call.callId}`,
      beforeDigest: null,
      afterDigest: null,
      details: { sandboxId: leaseId, tool: call.tool, fingerprint: call.fingerprint, status: call.status },
    });
  }
}

/** Throws `auth.approver_required` unless `by` may approve (the `approver` or `admin` role). */
function mayApprove(by: Principal, what = 'approving or denying a call'): void {
  if (by.role !== 'approver' && by.role !== 'admin')
    throw new AppError('auth.approver_required', `${what} needs an approver or admin API key`, {
      details: { role: by.role },
    });
}

/** `args` with each top-level string argument over ARG_PREVIEW_CHARS cut to that, and their names. */
function previewArgs(args: Record<string, unknown>): { args: Record<string, unknown>; truncated: string[] } {
  const truncated: string[] = [];
  const preview: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(args)) {
    if (typeof value === 'string' && value.length > ARG_PREVIEW_CHARS) {
      preview[name] = value.slice(0, ARG_PREVIEW_CHARS);
      truncated.push(name);
    } else preview[name] = value;
  }
  return { args: preview, truncated };
}
