/**
 * Pause and resume with fakes of their ports (an in-memory lease store with compare-and-swap, a
 * runtime that records freezes and thaws and can fail): the order of effects, idempotence, the
 * answers for each state, a freeze that fails taken back, and the memory-checkpoint refusal.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { LeaseStatus } from '../../contract/objects.js';
import type { Principal } from '../http/auth.js';
import { LeasePauser, type PauserDeps } from './pause.js';
import type { LeaseRecord, LeaseStore } from './store.js';
import { LeaseTransitions } from './transitions.js';

const NOW_MS = Date.parse('2026-01-01T01:00:00.000Z');
const by: Principal = { keyId: 'k1', role: 'user', tenant: 'default' };

function record(status: LeaseStatus, over: Partial<LeaseRecord> = {}): LeaseRecord {
  return {
    id: 'sbx_unit',
    status,
    createdAt: new Date(NOW_MS - 600_000).toISOString(),
    expiresAt: new Date(NOW_MS + 600_000).toISOString(),
    endedAt: null,
    phase: null,
    manifestHistory: [],
    endReason: null,
    image: 'img',
    policy: { name: 'default', version: 1, digest: 'sha256:p' },
    manifest: null,
    labels: {},
    pausedAt: status === 'paused' ? new Date(NOW_MS - 60_000).toISOString() : null,
    tenant: 'default',
    owner: 'sbx',
    env: {},
    policySnapshot: { resources: { maxTtlSeconds: 7200, pausedTtlSeconds: 3600 } } as unknown as LeaseRecord['policySnapshot'],
    secrets: [],
    containerId: 'c1',
    inProgressBy: null,
    releaseGraceUntil: null,
    endedBy: null,
    runningTtlLeftMs: status === 'paused' ? 300_000 : null,
    pausedTotalMs: 0,
    ...over,
  };
}

function world(initial: LeaseRecord, runtimeOver: { pause?: (set: (r: LeaseRecord) => void) => Promise<void> } = {}) {
  let current = initial;
  const set = (r: LeaseRecord): void => {
    current = r;
  };
  const log: string[] = [];
  const store: Pick<LeaseStore, 'transitionLease' | 'getLease'> = {
    transitionLease: async (_id, decide) => {
      const next = decide(current);
      if (!next) return { applied: false, lease: current };
      current = next.record;
      log.push(`${next.reason}`);
      return { applied: true, lease: current };
    },
    getLease: async () => current,
  };
  const transitions = new LeaseTransitions(store, 'proc-unit', () => new Date(NOW_MS));
  const pauser = new LeasePauser({
    transitions,
    store,
    runtime: {
      pause: async () => (runtimeOver.pause ? runtimeOver.pause(set) : void log.push('engine.pause')),
      unpause: async () => void log.push('engine.unpause'),
      checkpointSupport: async () => ({ supported: false, missing: ['the Docker engine runs without experimental features'] }),
      checkpoint: async () => void log.push('engine.checkpoint'),
    },
    expiry: { set: async (_id, atMs) => void log.push(`timer ${new Date(atMs).toISOString()}`) },
    audit: {
      record: async (entry) => {
        log.push(`audit ${entry.action}`);
        return { ...entry, id: 'a1', at: new Date(NOW_MS).toISOString() } as Awaited<ReturnType<PauserDeps['audit']['record']>>;
      },
    },
    now: () => new Date(NOW_MS),
    log: pino({ level: 'silent' }),
  });
  return { pauser, log, current: () => current };
}

const codeOf = async (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (err: unknown) => (err instanceof AppError ? err.code : String(err)),
  );

describe('LeasePauser', () => {
  it('pause: the record first, then the freeze, the timer moved to the end of the pause budget, audited', async () => {
    const w = world(record('ready'));
    const lease = await w.pauser.pause(w.current(), by);
    expect(lease.status).toBe('paused');
    expect(w.log).toEqual([
      'paused',
      'engine.pause',
      `timer ${new Date(NOW_MS + 3600_000).toISOString()}`,
      'engine.pause', // converge: the record still says paused
      'audit lease.pause',
    ]);
  });

  it('pause of a paused lease and resume of a ready one answer it unchanged, touching nothing', async () => {
    const paused = world(record('paused'));
    expect((await paused.pauser.pause(paused.current(), by)).status).toBe('paused');
    expect(paused.log).toEqual([]);
    const ready = world(record('ready'));
    expect((await ready.pauser.resume(ready.current(), by)).status).toBe('ready');
    expect(ready.log).toEqual([]);
  });

  it('a freeze the engine refuses is taken back (pause_undone) and its error thrown', async () => {
    const w = world(record('ready'), {
      pause: async () => {
        throw new AppError('runtime.unavailable', 'engine down');
      },
    });
    expect(await codeOf(w.pauser.pause(w.current(), by))).toBe('runtime.unavailable');
    expect(w.current().status).toBe('ready');
    expect(w.log).toEqual(['paused', 'pause_undone', `timer ${w.current().expiresAt}`]);
  });

  it('a release that began while the freeze was under way gets the sandbox thawed again (its agent settles the calls)', async () => {
    const w = world(record('ready'), {
      pause: async (set) => {
        w.log.push('engine.pause');
        set({ ...record('releasing'), pausedAt: new Date(NOW_MS).toISOString(), endReason: 'released' });
      },
    });
    await w.pauser.pause(w.current(), by);
    expect(w.log.slice(0, 4)).toEqual(['paused', 'engine.pause', `timer ${new Date(NOW_MS + 3600_000).toISOString()}`, 'engine.unpause']);
  });

  it('resume: the record first (the running TTL left from now), the timer, then the thaw', async () => {
    const w = world(record('paused'));
    const lease = await w.pauser.resume(w.current(), by);
    expect(lease).toMatchObject({ status: 'ready', pausedAt: null, expiresAt: new Date(NOW_MS + 300_000).toISOString() });
    expect(w.log.slice(0, 3)).toEqual(['resumed', `timer ${new Date(NOW_MS + 300_000).toISOString()}`, 'engine.unpause']);
  });

  it('pause or resume of an ended lease is 410, of one being created or released 409, with no pause budget 403', async () => {
    for (const [status, code] of [
      ['released', 'lease.released'],
      ['lost', 'lease.released'],
      ['expired', 'lease.expired'],
      ['starting', 'lease.not_ready'],
      ['releasing', 'lease.not_ready'],
    ] as const) {
      const w = world(record(status));
      expect(await codeOf(w.pauser.pause(w.current(), by)), `pause ${status}`).toBe(code);
      expect(await codeOf(w.pauser.resume(w.current(), by)), `resume ${status}`).toBe(code);
      expect(w.log).toEqual([]);
    }
    const spent = world(record('ready', { pausedTotalMs: 3600_000 }));
    expect(await codeOf(spent.pauser.pause(spent.current(), by))).toBe('policy.pause_denied');
  });

  it('a memory checkpoint where the engine cannot is policy.unenforceable, nothing made; of a paused lease lease.paused', async () => {
    const w = world(record('ready'));
    const err = await w.pauser.checkpoint(w.current(), by).catch((e: unknown) => e as AppError);
    expect(err).toMatchObject({ code: 'policy.unenforceable', details: { field: 'includeMemory' } });
    expect(w.log).toEqual([]);
    const paused = world(record('paused'));
    expect(await codeOf(paused.pauser.checkpoint(paused.current(), by))).toBe('lease.paused');
  });
});
