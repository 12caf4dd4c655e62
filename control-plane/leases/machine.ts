/**
 * The lease state machine, pure: `decide(lease, event, ctx)` is the next lease record (and the
 * reason and details of its lease event), or a typed refusal. Nothing here reads a clock, Redis
 * or Docker; `transitions.ts` applies a decision to the stored record by compare-and-swap, so of
 * several processes deciding the same event exactly one applies it.
 *
 * States (contract/objects.ts): `pending` → `starting` → `ready` → `releasing` → `released`,
 * `expired` or `lost`; a create that fails or is interrupted ends `failed`. `ready` ⇄ `paused`
 * (pause, resume); a paused lease may begin to end like a ready one.
 *
 * TTL while paused: the running clock stops. A pause keeps the running TTL left
 * (`runningTtlLeftMs`) and sets `expiresAt` to the end of the lease's pause budget (policy
 * `resources.pausedTtlSeconds`, minus `pausedTotalMs` of earlier pauses); a resume gives the
 * kept TTL back from now and adds the pause to `pausedTotalMs`. A lease still paused at its
 * `expiresAt` expires. The whole-life bound of a renewal (`maxTtlSeconds` from `createdAt`) does
 * not count time spent paused.
 *
 * Work in progress
 * (a create, a release) is held by one control-plane process (`inProgressBy`); only the holder
 * moves it on, and another process takes it over only from a holder it found dead.
 */
import { AppError } from '../../contract/errors.js';
import type { EnvironmentManifest, LeaseStatus } from '../../contract/objects.js';
import type { AuditActor } from '../audit/schema.js';
import type { LeaseRecord, LeaseTransition } from './store.js';

/** Why a lease ends (its `endReason` while `releasing`). */
export type EndReason = 'released' | 'expired' | 'container_missing' | 'container_exited';

/** What an end reason makes of a lease: its final status, its audit action, whether its calls get settled through the agent. */
export const ENDINGS: Record<EndReason, { status: LeaseStatus; action: string; settleCalls: boolean }> = {
  // Calls get their grace and are then cancelled through the agent, which reports how each ended.
  released: { status: 'released', action: 'lease.release', settleCalls: true },
  expired: { status: 'expired', action: 'lease.expire', settleCalls: true },
  // No agent is left to cancel anything: open calls end `effect_unknown` (or `cancelled` if never started).
  container_missing: { status: 'lost', action: 'lease.lost', settleCalls: false },
  container_exited: { status: 'lost', action: 'lease.lost', settleCalls: false },
};

/** The ending of `reason` (an unknown one, from an older record, is a release). */
export function endingOf(reason: string | null): (typeof ENDINGS)[EndReason] {
  return ENDINGS[reason as EndReason] ?? ENDINGS.released;
}

/** What can happen to a lease. */
export type LeaseMachineEvent =
  /** This process's create moves on: `pending` → `starting`. */
  | { type: 'start' }
  /** This process's create is done: `starting` → `ready`, with its manifest and container. */
  | { type: 'become_ready'; manifest: EnvironmentManifest; containerId: string }
  /** A create failed (`code`: the error's): `pending`/`starting` → `failed` (`create_failed`). */
  | { type: 'fail_create'; code: string }
  /** The create held by the dead process `holder` is failed: → `failed` (`create_interrupted`). */
  | { type: 'fail_interrupted'; holder: string | null }
  /** A ready lease's expiry moves to now + `ttlSeconds`, within its policy's `maxTtlSeconds` from creation. */
  | { type: 'renew'; ttlSeconds: number }
  /** A ready lease starts ending: → `releasing`, held by this process; running calls get `graceMs`. An expiry only once due. */
  | { type: 'begin_end'; reason: EndReason; actor: AuditActor; graceMs: number }
  /** The release held by the dead process `holder` is taken over by this one. */
  | { type: 'resume_release'; holder: string | null }
  /** This process's release could not tear everything down: handed back (held by nobody) for reconcile. */
  | { type: 'hand_back'; failures: string[] }
  /** This process's release is done: `releasing` → the final status of its end reason. */
  | { type: 'end' }
  /** A ready lease is frozen: `ready` → `paused` (its running TTL kept, `expiresAt` the end of its pause budget). */
  | { type: 'pause' }
  /**
   * A paused lease runs again: `paused` → `ready` (its kept TTL from now). `undo`: the freeze
   * itself failed, so the pause is taken back (reason `pause_undone`).
   */
  | { type: 'resume'; undo?: boolean }
  /**
   * A running (`ready` or `paused`) lease's policy changes in place: another version of it
   * (`policy_changed`) or its next phase (`phase_moved`), with the manifest that results, both
   * worked out from the record whose manifest digest is `basisDigest` (else refused `changed`:
   * read again). The manifest it had goes into `manifestHistory`.
   */
  | {
      type: 'change_policy';
      reason: 'policy_changed' | 'phase_moved';
      basisDigest: string;
      policy: LeaseRecord['policySnapshot'];
      ref: LeaseRecord['policy'];
      phase: string | null;
      manifest: EnvironmentManifest;
    };

/** Facts a decision needs from outside: the time and who decides. */
export interface MachineContext {
  nowMs: number;
  /** The deciding control-plane process (`Liveness.processId`). */
  processId: string;
}

/** Why an event does not apply. */
export type Refusal =
  /** The lease is not in a state the event applies to. */
  | { reason: 'wrong_state'; status: LeaseStatus }
  /** The work is held by another process than the one the event expects. */
  | { reason: 'not_holder'; status: LeaseStatus; holder: string | null }
  /** A policy change worked out from another record than the one stored now (another change came first). */
  | { reason: 'changed'; status: LeaseStatus }
  /** An expiry of a lease not due yet (a renewal came first). */
  | { reason: 'not_due'; status: LeaseStatus; expiresAt: string }
  /** A renewal of a lease already past its expiry (its timer is about to end it). */
  | { reason: 'past_due'; status: LeaseStatus; expiresAt: string }
  /** A pause of a lease whose policy allows no (more) time paused: `pausedTtlSeconds` 0 or spent. */
  | { reason: 'pause_budget_spent'; status: LeaseStatus; pausedTtlSeconds: number; pausedTotalMs: number }
  /** A renewal past the policy's bound on the lease's whole life. */
  | { reason: 'ttl_exceeds_policy'; status: LeaseStatus; maxTtlSeconds: number; maxExpiresAt: string; remainingSeconds: number };

export type Decision = { ok: true; transition: LeaseTransition } | { ok: false; refusal: Refusal };

const CREATING: readonly LeaseStatus[] = ['pending', 'starting'];
/** States a lease may begin to end from. */
const ENDABLE: readonly LeaseStatus[] = ['ready', 'paused'];

/** Decides what `event` makes of `lease` (see `LeaseMachineEvent`). Pure. */
export function decide(lease: LeaseRecord, event: LeaseMachineEvent, ctx: MachineContext): Decision {
  const l = lease;
  const now = new Date(ctx.nowMs).toISOString();
  const wrong = (): Decision => ({ ok: false, refusal: { reason: 'wrong_state', status: l.status } });
  const notHolder = (): Decision => ({ ok: false, refusal: { reason: 'not_holder', status: l.status, holder: l.inProgressBy } });
  const to = (record: LeaseRecord, reason: string, details?: Record<string, unknown>): Decision => ({
    ok: true,
    transition: details ? { record, reason, details } : { record, reason },
  });
  const mine = l.inProgressBy === ctx.processId;
  switch (event.type) {
    case 'start':
      if (l.status !== 'pending') return wrong();
      if (!mine) return notHolder();
      return to({ ...l, status: 'starting' }, 'starting');
    case 'become_ready':
      if (l.status !== 'starting') return wrong();
      if (!mine) return notHolder();
      return to({ ...l, status: 'ready', manifest: event.manifest, containerId: event.containerId, inProgressBy: null }, 'ready');
    case 'fail_create':
      if (!CREATING.includes(l.status)) return wrong();
      return to({ ...l, status: 'failed', endedAt: now, endReason: 'create_failed', inProgressBy: null }, 'create_failed', {
        code: event.code,
      });
    case 'fail_interrupted':
      if (!CREATING.includes(l.status)) return wrong();
      if (l.inProgressBy !== event.holder) return notHolder();
      return to({ ...l, status: 'failed', endedAt: now, endReason: 'create_interrupted', inProgressBy: null }, 'create_interrupted', {
        from: event.holder,
      });
    case 'renew': {
      if (l.status !== 'ready') return wrong();
      if (Date.parse(l.expiresAt) <= ctx.nowMs)
        return { ok: false, refusal: { reason: 'past_due', status: l.status, expiresAt: l.expiresAt } };
      const maxTtlSeconds = l.policySnapshot.resources.maxTtlSeconds;
      // Time spent paused is not running time: the bound moves by it.
      const maxMs = Date.parse(l.createdAt) + maxTtlSeconds * 1000 + l.pausedTotalMs;
      const expiresAtMs = ctx.nowMs + event.ttlSeconds * 1000;
      if (expiresAtMs > maxMs) {
        const remainingSeconds = Math.max(0, Math.floor((maxMs - ctx.nowMs) / 1000));
        return {
          ok: false,
          refusal: {
            reason: 'ttl_exceeds_policy',
            status: l.status,
            maxTtlSeconds,
            maxExpiresAt: new Date(maxMs).toISOString(),
            remainingSeconds,
          },
        };
      }
      const expiresAt = new Date(expiresAtMs).toISOString();
      return to({ ...l, expiresAt }, 'renewed', { ttlSeconds: event.ttlSeconds, expiresAt });
    }
    case 'change_policy': {
      if (l.status !== 'ready' && l.status !== 'paused') return wrong();
      if (l.manifest?.digest !== event.basisDigest) return { ok: false, refusal: { reason: 'changed', status: l.status } };
      const before = { digest: l.manifest.digest, policy: l.policy, phase: l.phase };
      const history = [...l.manifestHistory, { ...before, until: now, reason: event.reason }];
      const record = {
        ...l,
        policy: event.ref,
        policySnapshot: event.policy,
        phase: event.phase,
        manifest: event.manifest,
        manifestHistory: history,
      };
      return to(record, event.reason, { from: before, to: { digest: event.manifest.digest, policy: event.ref, phase: event.phase } });
    }
    case 'begin_end': {
      if (!ENDABLE.includes(l.status)) return wrong();
      if (event.reason === 'expired' && Date.parse(l.expiresAt) > ctx.nowMs)
        return { ok: false, refusal: { reason: 'not_due', status: l.status, expiresAt: l.expiresAt } };
      const releaseGraceUntil = new Date(ctx.nowMs + event.graceMs).toISOString();
      const record: LeaseRecord = {
        ...l,
        status: 'releasing',
        endReason: event.reason,
        endedBy: event.actor,
        inProgressBy: ctx.processId,
        releaseGraceUntil,
      };
      const details: Record<string, unknown> = event.graceMs > 0 ? { graceMs: event.graceMs } : {};
      if (l.status === 'paused') details.paused = true;
      return to(record, event.reason, details);
    }
    case 'pause': {
      if (l.status !== 'ready') return wrong();
      if (Date.parse(l.expiresAt) <= ctx.nowMs)
        return { ok: false, refusal: { reason: 'past_due', status: l.status, expiresAt: l.expiresAt } };
      const pausedTtlSeconds = l.policySnapshot.resources.pausedTtlSeconds;
      const budgetMs = pausedTtlSeconds * 1000 - l.pausedTotalMs;
      if (budgetMs < 1000)
        return { ok: false, refusal: { reason: 'pause_budget_spent', status: l.status, pausedTtlSeconds, pausedTotalMs: l.pausedTotalMs } };
      const runningTtlLeftMs = Date.parse(l.expiresAt) - ctx.nowMs;
      const expiresAt = new Date(ctx.nowMs + budgetMs).toISOString();
      return to({ ...l, status: 'paused', pausedAt: now, runningTtlLeftMs, expiresAt }, 'paused', {
        expiresAt,
        runningTtlLeftSeconds: Math.floor(runningTtlLeftMs / 1000),
      });
    }
    case 'resume': {
      if (l.status !== 'paused') return wrong();
      const pausedMs = Math.max(0, ctx.nowMs - Date.parse(l.pausedAt ?? now));
      const expiresAt = new Date(ctx.nowMs + (l.runningTtlLeftMs ?? 0)).toISOString();
      const record: LeaseRecord = {
        ...l,
        status: 'ready',
        expiresAt,
        pausedAt: null,
        runningTtlLeftMs: null,
        pausedTotalMs: l.pausedTotalMs + pausedMs,
      };
      return to(record, event.undo ? 'pause_undone' : 'resumed', { expiresAt, pausedSeconds: Math.round(pausedMs / 1000) });
    }
    case 'resume_release':
      if (l.status !== 'releasing') return wrong();
      if (l.inProgressBy !== event.holder) return notHolder();
      return to({ ...l, inProgressBy: ctx.processId }, 'release_resumed', { from: event.holder });
    case 'hand_back':
      if (l.status !== 'releasing') return wrong();
      if (!mine) return notHolder();
      return to({ ...l, inProgressBy: null }, 'teardown_incomplete', { failures: event.failures.slice(0, 5) });
    case 'end':
      if (l.status !== 'releasing') return wrong();
      if (!mine) return notHolder();
      return to(
        {
          ...l,
          status: endingOf(l.endReason).status,
          endedAt: now,
          inProgressBy: null,
          releaseGraceUntil: null,
          pausedAt: null,
          runningTtlLeftMs: null,
        },
        l.endReason ?? 'released',
      );
  }
}

/**
 * `lease` if calls and files may use it at `nowMs`. Throws AppError `lease.expired` (also a
 * ready or paused lease past its `expiresAt` whose timer is about to end it), `lease.paused`
 * (resume it first), `lease.released` (also failed and lost leases), `lease.not_ready`
 * (pending, starting, releasing). Pure.
 */
export function checkUsable(lease: LeaseRecord, nowMs: number): LeaseRecord {
  const id = lease.id;
  const due = ENDABLE.includes(lease.status) && Date.parse(lease.expiresAt) <= nowMs;
  if (due || lease.status === 'expired') {
    throw new AppError('lease.expired', `sandbox ${id} expired at ${lease.expiresAt}`, { details: { expiresAt: lease.expiresAt } });
  }
  switch (lease.status) {
    case 'ready':
      return lease;
    case 'paused':
      throw new AppError('lease.paused', `sandbox ${id} is paused; resume it first (POST /v1/sandboxes/${id}/resume)`, {
        details: { status: lease.status, pausedAt: lease.pausedAt, expiresAt: lease.expiresAt },
      });
    case 'released':
    case 'failed':
    case 'lost':
      throw new AppError('lease.released', `sandbox ${id} was released (${lease.endReason ?? lease.status})`, {
        details: { status: lease.status, endReason: lease.endReason },
      });
    default:
      throw new AppError('lease.not_ready', `sandbox ${id} is ${lease.status}`, { details: { status: lease.status } });
  }
}
