/**
 * The lease state machine, every event in every state: what it allows (and the record and
 * lease event it makes) and what it refuses (and why).
 */
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { EnvironmentManifest, LeaseStatus } from '../../contract/objects.js';
import { checkUsable, decide, ENDINGS, type EndReason, type LeaseMachineEvent, type MachineContext } from './machine.js';
import type { LeaseRecord } from './store.js';

const ME = 'proc-me';
const OTHER = 'proc-other';
const CREATED_MS = Date.parse('2026-01-01T00:00:00.000Z');
/** Ten minutes after creation; the lease expires after an hour and may live two. */
const NOW_MS = CREATED_MS + 10 * 60_000;
const ctx: MachineContext = { nowMs: NOW_MS, processId: ME };
const STATUSES: LeaseStatus[] = ['pending', 'starting', 'ready', 'paused', 'releasing', 'released', 'expired', 'failed', 'lost'];
const KEY = { keyId: 'k1', role: 'user', tenant: 'default' } as const;
const MANIFEST = { digest: 'sha256:m' } as unknown as EnvironmentManifest;
/** A paused lease (by default) was paused five minutes before now with 20 minutes of running TTL left. */
const PAUSED_AT_MS = NOW_MS - 5 * 60_000;
const RUNNING_LEFT_MS = 20 * 60_000;

function lease(status: LeaseStatus, over: Partial<LeaseRecord> = {}): LeaseRecord {
  return {
    id: 'sbx_test',
    status,
    createdAt: new Date(CREATED_MS).toISOString(),
    expiresAt: new Date(CREATED_MS + 3600_000).toISOString(),
    endedAt: null,
    phase: null,
    manifestHistory: [],
    endReason: status === 'releasing' ? 'released' : null,
    image: 'img',
    policy: { name: 'default', version: 1, digest: 'sha256:p' },
    manifest: null,
    labels: {},
    tenant: 'default',
    owner: 'sbx',
    env: {},
    policySnapshot: { resources: { maxTtlSeconds: 7200, pausedTtlSeconds: 3600 } } as unknown as LeaseRecord['policySnapshot'],
    secrets: [],
    containerId: null,
    inProgressBy: status === 'pending' || status === 'starting' || status === 'releasing' ? ME : null,
    releaseGraceUntil: null,
    endedBy: null,
    pausedAt: status === 'paused' ? new Date(PAUSED_AT_MS).toISOString() : null,
    runningTtlLeftMs: status === 'paused' ? RUNNING_LEFT_MS : null,
    pausedTotalMs: 0,
    ...over,
  };
}

/** Each event with the states it applies in (holder as the event expects it); every other state is `wrong_state`. */
const EVENTS: Array<{ event: LeaseMachineEvent; allowed: LeaseStatus[] }> = [
  { event: { type: 'start' }, allowed: ['pending'] },
  { event: { type: 'become_ready', manifest: MANIFEST, containerId: 'c1' }, allowed: ['starting'] },
  { event: { type: 'fail_create', code: 'runtime.unavailable' }, allowed: ['pending', 'starting'] },
  { event: { type: 'fail_interrupted', holder: ME }, allowed: ['pending', 'starting'] },
  { event: { type: 'renew', ttlSeconds: 600 }, allowed: ['ready'] },
  { event: { type: 'begin_end', reason: 'released', actor: 'system', graceMs: 0 }, allowed: ['ready', 'paused'] },
  { event: { type: 'pause' }, allowed: ['ready'] },
  { event: { type: 'resume' }, allowed: ['paused'] },
  { event: { type: 'resume_release', holder: ME }, allowed: ['releasing'] },
  { event: { type: 'hand_back', failures: ['x'] }, allowed: ['releasing'] },
  { event: { type: 'end' }, allowed: ['releasing'] },
];

describe('lease machine: which states each event applies in', () => {
  for (const { event, allowed } of EVENTS) {
    for (const status of STATUSES) {
      const applies = allowed.includes(status);
      it(`${event.type} in ${status}: ${applies ? 'applies' : 'refused (wrong_state)'}`, () => {
        const decision = decide(lease(status), event, ctx);
        if (applies) expect(decision.ok).toBe(true);
        else expect(decision).toEqual({ ok: false, refusal: { reason: 'wrong_state', status } });
      });
    }
  }
});

describe('lease machine: what each allowed transition makes', () => {
  const made = (l: LeaseRecord, event: LeaseMachineEvent) => {
    const decision = decide(l, event, ctx);
    if (!decision.ok) throw new Error(`refused: ${JSON.stringify(decision.refusal)}`);
    return decision.transition;
  };
  const now = new Date(NOW_MS).toISOString();

  it('start: pending → starting, still held by this process', () => {
    expect(made(lease('pending'), { type: 'start' })).toEqual({ record: lease('starting'), reason: 'starting' });
  });

  it('become_ready: starting → ready with manifest and container, held by nobody', () => {
    const t = made(lease('starting'), { type: 'become_ready', manifest: MANIFEST, containerId: 'c1' });
    expect(t).toEqual({ record: lease('ready', { manifest: MANIFEST, containerId: 'c1', inProgressBy: null }), reason: 'ready' });
  });

  it('fail_create: pending or starting → failed (create_failed) with the code, whoever held it', () => {
    for (const status of ['pending', 'starting'] as const) {
      const t = made(lease(status, { inProgressBy: OTHER }), { type: 'fail_create', code: 'runtime.unavailable' });
      expect(t).toEqual({
        record: lease('failed', { endedAt: now, endReason: 'create_failed', inProgressBy: null }),
        reason: 'create_failed',
        details: { code: 'runtime.unavailable' },
      });
    }
  });

  it('fail_interrupted: the dead holder’s create → failed (create_interrupted)', () => {
    const t = made(lease('starting', { inProgressBy: OTHER }), { type: 'fail_interrupted', holder: OTHER });
    expect(t).toEqual({
      record: lease('failed', { endedAt: now, endReason: 'create_interrupted', inProgressBy: null }),
      reason: 'create_interrupted',
      details: { from: OTHER },
    });
  });

  it('renew: expiresAt becomes now + ttlSeconds (also earlier than before)', () => {
    const expiresAt = new Date(NOW_MS + 600_000).toISOString();
    expect(made(lease('ready'), { type: 'renew', ttlSeconds: 600 })).toEqual({
      record: lease('ready', { expiresAt }),
      reason: 'renewed',
      details: { ttlSeconds: 600, expiresAt },
    });
  });

  it('renew: up to exactly the policy’s bound from creation', () => {
    const ttlSeconds = 7200 - 600;
    expect(made(lease('ready'), { type: 'renew', ttlSeconds }).record.expiresAt).toBe(new Date(CREATED_MS + 7200_000).toISOString());
  });

  it('begin_end: ready → releasing for each end reason, held by this process, with the grace', () => {
    for (const reason of Object.keys(ENDINGS) as EndReason[]) {
      const due = reason === 'expired' ? { expiresAt: new Date(NOW_MS).toISOString() } : {};
      const t = made(lease('ready', due), { type: 'begin_end', reason, actor: KEY, graceMs: 1500 });
      expect(t).toEqual({
        record: {
          ...lease('ready', due),
          status: 'releasing',
          endReason: reason,
          endedBy: KEY,
          inProgressBy: ME,
          releaseGraceUntil: new Date(NOW_MS + 1500).toISOString(),
        },
        reason,
        details: { graceMs: 1500 },
      });
    }
  });

  it('begin_end without grace records no details', () => {
    expect(made(lease('ready'), { type: 'begin_end', reason: 'released', actor: 'system', graceMs: 0 }).details).toEqual({});
  });

  it('resume_release: the dead holder’s release becomes this process’s', () => {
    const t = made(lease('releasing', { inProgressBy: OTHER }), { type: 'resume_release', holder: OTHER });
    expect(t).toEqual({ record: lease('releasing', { inProgressBy: ME }), reason: 'release_resumed', details: { from: OTHER } });
  });

  it('resume_release: a release handed back (held by nobody) is taken over too', () => {
    expect(made(lease('releasing', { inProgressBy: null }), { type: 'resume_release', holder: null }).record.inProgressBy).toBe(ME);
  });

  it('hand_back: this process’s release, held by nobody, with at most five failures', () => {
    const failures = ['a', 'b', 'c', 'd', 'e', 'f'];
    const t = made(lease('releasing'), { type: 'hand_back', failures });
    expect(t).toEqual({
      record: lease('releasing', { inProgressBy: null }),
      reason: 'teardown_incomplete',
      details: { failures: failures.slice(0, 5) },
    });
  });

  it('end: releasing → the final status of its end reason, the reason as the event’s', () => {
    for (const [reason, ending] of Object.entries(ENDINGS)) {
      const t = made(lease('releasing', { endReason: reason, releaseGraceUntil: now }), { type: 'end' });
      expect(t).toEqual({
        record: lease('releasing', { endReason: reason, status: ending.status, endedAt: now, inProgressBy: null, releaseGraceUntil: null }),
        reason,
      });
    }
  });

  it('end: an end reason from an older record ends as a release', () => {
    expect(made(lease('releasing', { endReason: null }), { type: 'end' })).toMatchObject({
      record: { status: 'released' },
      reason: 'released',
    });
  });
});

describe('lease machine: refusals other than the state', () => {
  const refusal = (l: LeaseRecord, event: LeaseMachineEvent) => {
    const decision = decide(l, event, ctx);
    return decision.ok ? null : decision.refusal;
  };

  it('a create step of another process’s create is not_holder', () => {
    expect(refusal(lease('pending', { inProgressBy: OTHER }), { type: 'start' })).toEqual({
      reason: 'not_holder',
      status: 'pending',
      holder: OTHER,
    });
    expect(refusal(lease('starting', { inProgressBy: OTHER }), { type: 'become_ready', manifest: MANIFEST, containerId: 'c' })).toEqual({
      reason: 'not_holder',
      status: 'starting',
      holder: OTHER,
    });
  });

  it('failing an interrupted create whose holder changed since it was found dead is not_holder', () => {
    expect(refusal(lease('starting', { inProgressBy: ME }), { type: 'fail_interrupted', holder: OTHER })).toEqual({
      reason: 'not_holder',
      status: 'starting',
      holder: ME,
    });
  });

  it('resuming a release another process took first is not_holder', () => {
    expect(refusal(lease('releasing', { inProgressBy: ME }), { type: 'resume_release', holder: OTHER })).toEqual({
      reason: 'not_holder',
      status: 'releasing',
      holder: ME,
    });
  });

  it('handing back or ending another process’s release is not_holder', () => {
    for (const event of [{ type: 'hand_back', failures: [] }, { type: 'end' }] as LeaseMachineEvent[]) {
      expect(refusal(lease('releasing', { inProgressBy: OTHER }), event)).toEqual({
        reason: 'not_holder',
        status: 'releasing',
        holder: OTHER,
      });
    }
  });

  it('an expiry of a lease not due yet (renewed first) is not_due; other end reasons need no due date', () => {
    const l = lease('ready');
    expect(refusal(l, { type: 'begin_end', reason: 'expired', actor: 'system', graceMs: 0 })).toEqual({
      reason: 'not_due',
      status: 'ready',
      expiresAt: l.expiresAt,
    });
    expect(refusal(l, { type: 'begin_end', reason: 'container_missing', actor: 'system', graceMs: 0 })).toBeNull();
  });

  it('renewing a lease past its expiry is past_due', () => {
    const expiresAt = new Date(NOW_MS).toISOString();
    expect(refusal(lease('ready', { expiresAt }), { type: 'renew', ttlSeconds: 60 })).toEqual({
      reason: 'past_due',
      status: 'ready',
      expiresAt,
    });
  });

  it('renewing past the policy’s bound on the whole life is ttl_exceeds_policy, with the bound', () => {
    expect(refusal(lease('ready'), { type: 'renew', ttlSeconds: 7200 })).toEqual({
      reason: 'ttl_exceeds_policy',
      status: 'ready',
      maxTtlSeconds: 7200,
      maxExpiresAt: new Date(CREATED_MS + 7200_000).toISOString(),
      remainingSeconds: 6600,
    });
  });
});

describe('checkUsable', () => {
  const code = (l: LeaseRecord): string | null => {
    try {
      checkUsable(l, NOW_MS);
      return null;
    } catch (err) {
      return (err as AppError).code;
    }
  };

  it('a ready lease before its expiry is usable; each other state says why not', () => {
    const expected: Record<LeaseStatus, string | null> = {
      pending: 'lease.not_ready',
      starting: 'lease.not_ready',
      ready: null,
      paused: 'lease.paused',
      releasing: 'lease.not_ready',
      released: 'lease.released',
      expired: 'lease.expired',
      failed: 'lease.released',
      lost: 'lease.released',
    };
    for (const status of STATUSES) expect(code(lease(status)), status).toBe(expected[status]);
  });

  it('a ready lease at its expiry is expired (its timer is about to end it)', () => {
    expect(code(lease('ready', { expiresAt: new Date(NOW_MS).toISOString() }))).toBe('lease.expired');
  });

  it('a paused lease at the end of its pause budget is expired, before it is paused', () => {
    expect(code(lease('paused', { expiresAt: new Date(NOW_MS).toISOString() }))).toBe('lease.expired');
  });
});

describe('lease machine: pause and resume (the running TTL stops while paused)', () => {
  const made = (l: LeaseRecord, event: LeaseMachineEvent, nowMs = NOW_MS) => {
    const decision = decide(l, event, { ...ctx, nowMs });
    if (!decision.ok) throw new Error(`refused: ${JSON.stringify(decision.refusal)}`);
    return decision.transition;
  };
  const refusal = (l: LeaseRecord, event: LeaseMachineEvent) => {
    const decision = decide(l, event, ctx);
    return decision.ok ? null : decision.refusal;
  };
  const iso = (ms: number) => new Date(ms).toISOString();

  it('pause: ready → paused, keeping the running TTL left and expiring at the end of the pause budget', () => {
    const t = made(lease('ready'), { type: 'pause' });
    const runningTtlLeftMs = CREATED_MS + 3600_000 - NOW_MS;
    expect(t).toEqual({
      record: lease('ready', { status: 'paused', pausedAt: iso(NOW_MS), runningTtlLeftMs, expiresAt: iso(NOW_MS + 3600_000) }),
      reason: 'paused',
      details: { expiresAt: iso(NOW_MS + 3600_000), runningTtlLeftSeconds: runningTtlLeftMs / 1000 },
    });
  });

  it('pause: earlier pauses count against the budget (pausedTtlSeconds over the whole life)', () => {
    const t = made(lease('ready', { pausedTotalMs: 3000_000 }), { type: 'pause' });
    expect(t.record.expiresAt).toBe(iso(NOW_MS + 600_000));
  });

  it('pause: a spent budget, or a policy with pausedTtlSeconds 0, is pause_budget_spent', () => {
    expect(refusal(lease('ready', { pausedTotalMs: 3600_000 }), { type: 'pause' })).toEqual({
      reason: 'pause_budget_spent',
      status: 'ready',
      pausedTtlSeconds: 3600,
      pausedTotalMs: 3600_000,
    });
    const none = lease('ready', {
      policySnapshot: { resources: { maxTtlSeconds: 7200, pausedTtlSeconds: 0 } } as unknown as LeaseRecord['policySnapshot'],
    });
    expect(refusal(none, { type: 'pause' })).toMatchObject({ reason: 'pause_budget_spent', pausedTtlSeconds: 0 });
  });

  it('pause: a ready lease past its expiry is past_due (its timer is about to end it)', () => {
    const expiresAt = iso(NOW_MS);
    expect(refusal(lease('ready', { expiresAt }), { type: 'pause' })).toEqual({ reason: 'past_due', status: 'ready', expiresAt });
  });

  it('resume: paused → ready with the kept running TTL from now; the pause adds to pausedTotalMs', () => {
    const t = made(lease('paused', { pausedTotalMs: 1000 }), { type: 'resume' });
    const expiresAt = iso(NOW_MS + RUNNING_LEFT_MS);
    expect(t).toEqual({
      record: lease('ready', { expiresAt, pausedTotalMs: 1000 + (NOW_MS - PAUSED_AT_MS) }),
      reason: 'resumed',
      details: { expiresAt, pausedSeconds: 300 },
    });
  });

  it('resume with undo (the freeze failed) is recorded as pause_undone', () => {
    expect(made(lease('paused'), { type: 'resume', undo: true }).reason).toBe('pause_undone');
  });

  it('pause then resume an hour of running TTL later leaves the running TTL where it was', () => {
    const paused = made(lease('ready'), { type: 'pause' }).record;
    const later = NOW_MS + 30 * 60_000;
    const resumed = made(paused, { type: 'resume' }, later).record;
    expect(Date.parse(resumed.expiresAt) - later).toBe(Date.parse(lease('ready').expiresAt) - NOW_MS);
    expect(resumed.pausedTotalMs).toBe(30 * 60_000);
  });

  it('renew: the whole-life bound does not count time spent paused', () => {
    const l = lease('ready', { pausedTotalMs: 600_000 });
    expect(made(l, { type: 'renew', ttlSeconds: 7200 }).record.expiresAt).toBe(iso(CREATED_MS + 7200_000 + 600_000));
  });

  it('begin_end: a paused lease starts ending (details.paused), keeping pausedAt so the release thaws it first', () => {
    const due = { expiresAt: iso(NOW_MS) };
    const t = made(lease('paused', due), { type: 'begin_end', reason: 'expired', actor: 'system', graceMs: 0 });
    expect(t.record).toMatchObject({ status: 'releasing', endReason: 'expired', pausedAt: iso(PAUSED_AT_MS), inProgressBy: ME });
    expect(t.details).toEqual({ paused: true });
    expect(refusal(lease('paused'), { type: 'begin_end', reason: 'expired', actor: 'system', graceMs: 0 })).toMatchObject({
      reason: 'not_due',
      status: 'paused',
    });
  });

  it('end: a lease released from a pause ends with no pause left on its record', () => {
    const releasing = lease('releasing', { pausedAt: iso(PAUSED_AT_MS), runningTtlLeftMs: RUNNING_LEFT_MS });
    expect(made(releasing, { type: 'end' }).record).toMatchObject({ status: 'released', pausedAt: null, runningTtlLeftMs: null });
  });
});
