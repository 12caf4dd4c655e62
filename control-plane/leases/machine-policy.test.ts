/**
 * The lease machine's `change_policy` event (a phase move, a live policy change): where it
 * applies, what it makes, and its refusal when the record changed since the change was worked out.
 */
import { describe, expect, it } from 'vitest';
import type { EnvironmentManifest } from '../../contract/objects.js';
import { decide, type LeaseMachineEvent } from './machine.js';
import type { LeaseRecord } from './store.js';

const ctx = { nowMs: Date.parse('2026-12-04T10:00:00.000Z'), processId: 'p1' };
const REF = { name: 'phased', version: 1, digest: 'sha256:p' };
const OLD = { digest: 'sha256:old', phase: 'setup' } as unknown as EnvironmentManifest;
const NEW = { digest: 'sha256:new', phase: 'agent' } as unknown as EnvironmentManifest;
const POLICY = { name: 'phased' } as unknown as LeaseRecord['policySnapshot'];
const record = (status: LeaseRecord['status']): LeaseRecord =>
  ({ id: 'sbx_p', status, policy: REF, phase: 'setup', manifest: OLD, manifestHistory: [], policySnapshot: {} }) as unknown as LeaseRecord;
const event = (basisDigest: string): LeaseMachineEvent => ({
  type: 'change_policy',
  reason: 'phase_moved',
  basisDigest,
  policy: POLICY,
  ref: REF,
  phase: 'agent',
  manifest: NEW,
});

describe('lease machine: change_policy', () => {
  it('a ready or paused lease takes the policy, phase and manifest; the manifest it had goes into manifestHistory', () => {
    for (const status of ['ready', 'paused'] as const) {
      const decision = decide(record(status), event('sha256:old'), ctx);
      expect(decision).toEqual({
        ok: true,
        transition: {
          record: {
            ...record(status),
            policySnapshot: POLICY,
            phase: 'agent',
            manifest: NEW,
            manifestHistory: [
              { digest: 'sha256:old', policy: REF, phase: 'setup', until: '2026-12-04T10:00:00.000Z', reason: 'phase_moved' },
            ],
          },
          reason: 'phase_moved',
          details: {
            from: { digest: 'sha256:old', policy: REF, phase: 'setup' },
            to: { digest: 'sha256:new', policy: REF, phase: 'agent' },
          },
        },
      });
    }
  });

  it('any other state is wrong_state; a record whose manifest is not the basis is changed (work it out again)', () => {
    for (const status of ['pending', 'starting', 'releasing', 'released', 'expired', 'failed', 'lost'] as const)
      expect(decide(record(status), event('sha256:old'), ctx)).toEqual({ ok: false, refusal: { reason: 'wrong_state', status } });
    expect(decide(record('ready'), event('sha256:other'), ctx)).toEqual({ ok: false, refusal: { reason: 'changed', status: 'ready' } });
  });
});
