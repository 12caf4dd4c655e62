/**
 * How a lease ends — released, expired, or lost with its container: the `ready` → `releasing`
 * step that exactly one caller wins, settling the calls (grace, then the cancel chain) where an
 * agent is there to do it, the teardown, and only then the final status, its lease event, the
 * quota share given back and the audit entry. A release whose process died is taken over.
 */
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import type { Lease } from '../../contract/objects.js';
import type { Liveness } from '../agent-link/liveness.js';
import type { AuditLog } from '../audit/service.js';
import type { AuditActor } from '../audit/schema.js';
import type { QuotaService } from '../quotas/service.js';
import type { DurableTimers } from '../redis/timers.js';
import type { SandboxRuntime } from '../runtime/runtime.js';
import { endingOf, type EndReason } from './machine.js';
import type { LeaseCalls } from './ports.js';
import type { Provisioner } from './provision.js';
import { toView, type LeaseRecord, type LeaseStore } from './store.js';
import type { Teardown } from './teardown.js';
import type { LeaseTransitions } from './transitions.js';

export interface EnderDeps {
  transitions: LeaseTransitions;
  store: Pick<LeaseStore, 'getLease'>;
  calls: Pick<LeaseCalls, 'openCalls' | 'waitAllFinished' | 'cancel' | 'waitingForApproval'>;
  provisioner: Pick<Provisioner, 'attach'>;
  teardown: Pick<Teardown, 'run'>;
  /** Thaws a paused sandbox before it ends, so its agent can settle its calls. */
  runtime: Pick<SandboxRuntime, 'unpause'>;
  liveness: Pick<Liveness, 'isAlive'>;
  expiry: Pick<DurableTimers, 'clear'>;
  /** Starts the retention clock of everything an ended lease recorded (its record, calls, receipts, artifacts, egress log). */
  retain: (leaseId: string, seconds: number) => Promise<void>;
  quotas: Pick<QuotaService, 'release'>;
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
  log: Logger;
}

export interface EnderOptions {
  /** How long an ended lease's records (calls, events, receipts) stay readable, seconds. */
  retentionSeconds: number;
  /**
   * How long a release waits, after it cancelled the calls still running, for their agent to
   * report them ended (the process group killed: SIGTERM, then SIGKILL after the call's
   * `killGraceMs`), ms. Calls still open then end `effect_unknown`. Default 10 000.
   */
  cancelWaitMs?: number;
}

/** Poll period of a request waiting for a release another process is doing, ms. */
const AWAIT_RELEASE_POLL_MS = 200;

export class LeaseEnder {
  constructor(
    private readonly deps: EnderDeps,
    private readonly options: EnderOptions,
  ) {}

  /**
   * Starts ending a ready lease for `reason`: the `ready` → `releasing` compare-and-swap that
   * exactly one caller wins (an expiry only while the lease is past its `expiresAt`, so a
   * renewal that came first wins). Returns whether this caller won, and the lease as it is.
   * Throws `lease.not_found`.
   */
  async begin(id: string, reason: EndReason, actor: AuditActor, graceMs: number): Promise<{ applied: boolean; lease: LeaseRecord }> {
    const begun = await this.deps.transitions.apply(id, { type: 'begin_end', reason, actor, graceMs });
    if (!begun.lease) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return { applied: begun.applied, lease: begun.lease };
  }

  /**
   * Finishes a release this process holds (`inProgressBy`): settles the calls where an agent is
   * there to do it, tears everything down, and only then records the final status, its lease
   * event and its audit entry. When a teardown step fails, the lease stays `releasing`, handed
   * back (`inProgressBy` null) for reconcile to finish.
   */
  async finish(lease: LeaseRecord): Promise<Lease> {
    const { transitions, log } = this.deps;
    const ending = endingOf(lease.endReason);
    // Ended from a pause: thawed first, so its calls end through the agent as usual (a frozen
    // agent answers nothing). A container already gone is the teardown's business.
    if (lease.pausedAt !== null && ending.settleCalls) {
      await this.deps.runtime
        .unpause(lease.id)
        .catch((err: unknown) => log.warn({ leaseId: lease.id, err }, 'unpause before release failed'));
    }
    if (ending.settleCalls) await this.settleCalls(lease);
    const failures = await this.deps.teardown.run(lease.id, lease.manifest?.digest ?? null);
    if (failures.length > 0) {
      log.warn({ leaseId: lease.id, failures: failures.map(String) }, 'sandbox teardown incomplete; reconcile will finish it');
      const handedBack = await transitions.apply(lease.id, { type: 'hand_back', failures: failures.map(String) });
      return toView(handedBack.lease ?? lease);
    }
    const ended = await transitions.apply(lease.id, { type: 'end' });
    if (!ended.lease) throw new AppError('lease.not_found', `no sandbox ${lease.id}`, { details: { id: lease.id } });
    if (ended.applied) {
      await this.closeRecords(lease.id);
      await this.deps.quotas.release(lease.id);
      await this.deps.audit.record({
        actor: ended.lease.endedBy ?? 'system',
        action: ending.action,
        target: `lease:${lease.id}`,
        beforeDigest: lease.manifest?.digest ?? null,
        afterDigest: null,
        details: { tenant: lease.tenant, reason: lease.endReason },
      });
      log.info({ leaseId: lease.id, status: ending.status, reason: lease.endReason }, 'sandbox ended');
    }
    return toView(ended.lease);
  }

  /** Starts the retention clock of an ended lease's records and drops its expiry timer. */
  async closeRecords(id: string): Promise<void> {
    await this.deps.retain(id, this.options.retentionSeconds);
    await this.deps.expiry.clear(id);
  }

  /**
   * Waits for a release another request or process is doing, and returns the final record; a
   * release whose process died is taken over. Gives up (returning the lease as it is,
   * `releasing`) after its grace plus a minute.
   */
  async awaitEnded(lease: LeaseRecord): Promise<Lease> {
    const deadline = Date.parse(lease.releaseGraceUntil ?? this.deps.now().toISOString()) + 60_000;
    for (;;) {
      const current = await this.deps.store.getLease(lease.id);
      if (!current) throw new AppError('lease.not_found', `no sandbox ${lease.id}`, { details: { id: lease.id } });
      if (current.status !== 'releasing' || this.deps.now().getTime() > deadline) return toView(current);
      if (!(await this.isAlive(current.inProgressBy))) {
        const resumed = await this.resume(current);
        if (resumed) return resumed;
      }
      await new Promise((r) => setTimeout(r, AWAIT_RELEASE_POLL_MS));
    }
  }

  /**
   * Takes over a release whose process is gone (compare-and-swap of `inProgressBy`, so one
   * process does) and finishes it. Returns null when another process took it first.
   */
  async resume(lease: LeaseRecord): Promise<Lease | null> {
    const taken = await this.deps.transitions.apply(lease.id, { type: 'resume_release', holder: lease.inProgressBy });
    return taken.applied ? this.finish(taken.lease!) : null;
  }

  /** Whether the control-plane process `processId` is alive (null: no process). */
  async isAlive(processId: string | null): Promise<boolean> {
    return processId !== null && (await this.deps.liveness.isAlive(processId));
  }

  /**
   * Cancels the calls waiting for approval, lets the other open calls finish until its
   * `releaseGraceUntil`, then cancels the rest
   * through the normal chain (queued ones end `cancelled` with nothing run; the agent kills the
   * process group of running ones and reports) and waits up to `cancelWaitMs` for the agent's
   * reports. This process consumes the lease's returns meanwhile, unless a live one does.
   */
  private async settleCalls(lease: LeaseRecord): Promise<void> {
    const { calls, log, now } = this.deps;
    await this.deps.provisioner.attach(lease.id, lease.policySnapshot, lease.secrets);
    // A call waiting for approval cannot be approved any more (the lease is ending): it ends
    // cancelled now, with nothing run, rather than hold the release for the whole grace.
    for (const callId of await calls.waitingForApproval(lease.id))
      await calls.cancel(lease, callId).catch((err: unknown) => log.warn({ leaseId: lease.id, callId, err }, 'cancel at release failed'));
    await calls.waitAllFinished(lease.id, Date.parse(lease.releaseGraceUntil ?? now().toISOString()));
    const open = await calls.openCalls(lease.id);
    if (open.length === 0) return;
    // Newest first: a call waiting behind a running one is marked cancelled before the running
    // one dies, so the agent never starts it in between.
    for (const callId of [...open].reverse()) {
      await calls.cancel(lease, callId).catch((err: unknown) => log.warn({ leaseId: lease.id, callId, err }, 'cancel at release failed'));
    }
    await calls.waitAllFinished(lease.id, now().getTime() + (this.options.cancelWaitMs ?? 10_000));
  }
}
