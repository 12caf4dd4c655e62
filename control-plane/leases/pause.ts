/**
 * Pause, resume and memory checkpoints of a lease. The record leads and the engine follows: a
 * pause is first the `ready` → `paused` compare-and-swap (one of several racing requests wins),
 * then the cgroup freeze; a resume is first `paused` → `ready`, then the thaw. A process that
 * dies in between leaves a record the engine does not match yet, and reconcile freezes or thaws
 * the container to match the record (leases/reconcile.ts). The lease's durable expiry timer moves
 * with each: while paused it fires at the end of the pause budget (machine.ts).
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import type { Lease } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import type { DurableTimers } from '../redis/timers.js';
import type { SandboxRuntime } from '../runtime/runtime.js';
import { checkUsable } from './machine.js';
import { toView, type LeaseRecord, type LeaseStore } from './store.js';
import type { Applied, LeaseTransitions } from './transitions.js';

export interface PauserDeps {
  transitions: Pick<LeaseTransitions, 'apply'>;
  store: Pick<LeaseStore, 'getLease'>;
  runtime: Pick<SandboxRuntime, 'pause' | 'unpause' | 'checkpointSupport' | 'checkpoint'>;
  expiry: Pick<DurableTimers, 'set'>;
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
  log: Logger;
}

/** A memory checkpoint of a running sandbox (`POST /v1/sandboxes/:id/checkpoints`). */
export interface Checkpoint {
  checkpointId: string;
  leaseId: string;
  includeMemory: true;
  createdAt: string;
}

export class LeasePauser {
  constructor(private readonly deps: PauserDeps) {}

  /**
   * Freezes every process of `lease` (it must be visible to the caller; the lease guard checked).
   * A paused lease is answered unchanged. Throws `policy.pause_denied` (no pause budget left),
   * `lease.expired`, `lease.released` (410), `lease.not_ready` (being created or released; or
   * its container is not running), `runtime.unavailable` (the pause is then taken back).
   */
  async pause(lease: LeaseRecord, by: Principal): Promise<Lease> {
    const { transitions, runtime, log } = this.deps;
    const paused = await transitions.apply(lease.id, { type: 'pause' });
    if (!paused.applied) return this.unchanged(lease.id, paused, 'paused');
    const record = paused.lease!;
    try {
      await runtime.pause(lease.id);
    } catch (err) {
      const undone = await transitions.apply(lease.id, { type: 'resume', undo: true });
      if (undone.applied) await this.deps.expiry.set(lease.id, Date.parse(undone.lease!.expiresAt));
      throw err;
    }
    await this.deps.expiry.set(lease.id, Date.parse(record.expiresAt));
    await this.converge(lease.id);
    await this.audit(by, 'lease.pause', record);
    log.info({ sandboxId: lease.id, expiresAt: record.expiresAt }, 'sandbox paused');
    return toView(record);
  }

  /**
   * Thaws a paused lease: its processes go on where they were, with their open files. A ready
   * lease is answered unchanged. Throws `lease.expired`, `lease.released` (410), `lease.not_ready`,
   * `runtime.unavailable` (the record says ready; reconcile thaws the container).
   */
  async resume(lease: LeaseRecord, by: Principal): Promise<Lease> {
    const { transitions, runtime, log } = this.deps;
    const resumed = await transitions.apply(lease.id, { type: 'resume' });
    if (!resumed.applied) return this.unchanged(lease.id, resumed, 'ready');
    const record = resumed.lease!;
    await this.deps.expiry.set(lease.id, Date.parse(record.expiresAt));
    await runtime.unpause(lease.id);
    await this.converge(lease.id);
    await this.audit(by, 'lease.resume', record);
    log.info({ sandboxId: lease.id, expiresAt: record.expiresAt }, 'sandbox resumed');
    return toView(record);
  }

  /**
   * Checkpoints the memory and processes of a usable lease, leaving it running, when the engine
   * can (`docker checkpoint`: an experimental engine and a working criu). Throws
   * `policy.unenforceable` (422, `details.missing` says what the engine lacks) where it cannot:
   * never a filesystem-only snapshot in its place. Throws `lease.paused` and the other
   * `checkUsable` codes, `runtime.unavailable`.
   */
  async checkpoint(lease: LeaseRecord, by: Principal): Promise<Checkpoint> {
    checkUsable(lease, this.deps.now().getTime());
    const support = await this.deps.runtime.checkpointSupport();
    if (!support.supported) {
      throw new AppError(
        'policy.unenforceable',
        `memory checkpoints are not available on this engine: ${support.missing.join('; ')}; no snapshot was made (a filesystem snapshot is POST /v1/sandboxes/${lease.id}/snapshots)`,
        { details: { field: 'includeMemory', missing: support.missing } },
      );
    }
    const checkpointId = `ckpt_${randomBytes(8).toString('hex')}`;
    await this.deps.runtime.checkpoint(lease.id, checkpointId);
    const checkpoint: Checkpoint = { checkpointId, leaseId: lease.id, includeMemory: true, createdAt: this.deps.now().toISOString() };
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'lease.checkpoint',
      target: `lease:${lease.id}`,
      beforeDigest: lease.manifest?.digest ?? null,
      afterDigest: lease.manifest?.digest ?? null,
      details: { tenant: lease.tenant, checkpointId },
    });
    return checkpoint;
  }

  /**
   * The answer to a pause or resume that did not apply: the lease unchanged when it is already
   * `target`, else the error its state calls for.
   */
  private unchanged(id: string, applied: Applied, target: 'paused' | 'ready'): Lease {
    const current = applied.lease;
    if (!current) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    const refusal = applied.refusal;
    if (refusal?.reason === 'pause_budget_spent') {
      throw new AppError(
        'policy.pause_denied',
        refusal.pausedTtlSeconds === 0
          ? `the policy of sandbox ${id} does not allow pausing (resources.pausedTtlSeconds 0)`
          : `sandbox ${id} has used its ${refusal.pausedTtlSeconds} s of pause (resources.pausedTtlSeconds)`,
        { details: { pausedTtlSeconds: refusal.pausedTtlSeconds, pausedTotalMs: refusal.pausedTotalMs } },
      );
    }
    const nowMs = this.deps.now().getTime();
    if (current.status === target && Date.parse(current.expiresAt) > nowMs) return toView(current);
    // Not usable (ended, expiring, being created or released) says why; anything else changed under us.
    checkUsable(current, nowMs);
    throw new AppError('lease.not_ready', `sandbox ${id} changed while it was being ${target}; read it and retry`, {
      details: { status: current.status },
    });
  }

  /**
   * After the engine did its part: if a racing request changed the record meanwhile (a resume
   * or a release right after a pause), the engine is made to match the record as it is now.
   */
  private async converge(id: string): Promise<void> {
    const now = await this.deps.store.getLease(id);
    if (now?.status === 'paused') await this.deps.runtime.pause(id).catch(() => undefined);
    // Ready again, or being released (a release thaws first, so its agent can settle the calls;
    // a freeze landing after that thaw would leave the agent frozen through the release).
    if (now?.status === 'ready' || now?.status === 'releasing') await this.deps.runtime.unpause(id).catch(() => undefined);
  }

  private async audit(by: Principal, action: string, lease: LeaseRecord): Promise<void> {
    await this.deps.audit.record({
      actor: actorOf(by),
      action,
      target: `lease:${lease.id}`,
      beforeDigest: lease.manifest?.digest ?? null,
      afterDigest: lease.manifest?.digest ?? null,
      details: { tenant: lease.tenant, expiresAt: lease.expiresAt },
    });
  }
}
