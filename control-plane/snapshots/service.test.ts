import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Principal } from '../http/auth.js';
import type { LeaseRecord } from '../leases/store.js';
import type { SnapshotRecord } from './schema.js';
import { SnapshotService, type SnapshotServiceDeps } from './service.js';

const alice: Principal = { keyId: 'k1', role: 'user', tenant: 'alice' } as Principal;
const bob: Principal = { keyId: 'k2', role: 'user', tenant: 'bob' } as Principal;

const lease = {
  id: 'sbx_parent',
  status: 'ready',
  tenant: 'alice',
  image: 'img',
  policy: { name: 'default', version: 1, digest: 'sha256:p' },
  manifest: {
    digest: 'sha256:m',
    writableRoots: [
      { path: '/workspace', sizeBytes: 10, kind: 'volume', source: 'policy', fromImage: true },
      { path: '/testbed', sizeBytes: 5, kind: 'volume', source: 'lease', fromImage: true },
    ],
  },
  policySnapshot: { runtime: { toolUser: { uid: 1000, gid: 1000 } }, filesystem: { writableRoots: [] } },
} as unknown as LeaseRecord;

function world(
  over: { sizeBytes?: number; estimateBytes?: number; quotaBytes?: number; maxSandboxes?: number | null; failCreateAt?: number } = {},
) {
  const records = new Map<string, SnapshotRecord>();
  const reservations = new Map<string, { tenant: string; bytes: number }>();
  /** What `tenant` holds besides capture `except`: records and reservations. */
  const held = (tenant: string, except: string): number =>
    [...records.values()].filter((r) => r.tenant === tenant).reduce((sum, r) => sum + r.sizeBytes, 0) +
    [...reservations].filter(([id, r]) => id !== except && r.tenant === tenant).reduce((sum, [, r]) => sum + r.bytes, 0);
  const removed: string[] = [];
  const released: string[] = [];
  const using = new Set<string>();
  let creates = 0;
  const deps: SnapshotServiceDeps = {
    store: {
      reserve: async (id, tenant, bytes, quotaBytes) => {
        const used = held(tenant, id);
        if (used + bytes > quotaBytes) return used;
        reservations.set(id, { tenant, bytes });
        return null;
      },
      putWithinQuota: async (r, quotaBytes) => {
        const used = held(r.tenant, r.id);
        if (used + r.sizeBytes > quotaBytes) return used;
        records.set(r.id, r);
        reservations.delete(r.id);
        return null;
      },
      release: async (id) => void reservations.delete(id),
      get: async (id) => records.get(id) ?? null,
      list: async () => [...records.values()],
      delete: async (id) => records.delete(id),
    },
    runtime: {
      snapshot: async () => ({ ref: 'sbx-snapshot:abc', imageId: 'sha256:abc', digest: 'sha256:abd', sizeBytes: over.sizeBytes ?? 100 }),
      removeSnapshot: async (ref) => void removed.push(ref),
      snapshotBytesEstimate: async () => over.estimateBytes ?? 50,
    },
    leases: {
      visible: async (id, by) => {
        if (id !== lease.id || by.tenant !== 'alice') throw Object.assign(new Error('nf'), { code: 'lease.not_found' });
        return lease;
      },
      create: async () => {
        creates++;
        if (creates === over.failCreateAt) throw new Error('boom');
        return { lease: { id: `sbx_f${creates}` } as never, replayed: false };
      },
      forgetIdempotencyKey: async () => undefined,
      release: async (id) => void released.push(id),
      using: async (ref) => (using.has(ref) ? ['sbx_child'] : []),
    },
    openCalls: async () => ['call_1'],
    quotas: {
      get: async () =>
        ({ tenant: 'alice', limits: { maxSandboxes: over.maxSandboxes ?? 10 }, usage: { sandboxes: 1 }, configured: null }) as never,
    },
    audit: { record: async () => ({}) as never },
    ownership: { owner: 'o', installation: 'i' },
    settings: { ttlSeconds: 3600, quotaBytes: over.quotaBytes ?? 1000, forkMax: 5 },
    now: () => new Date('2026-01-01T00:00:00Z'),
    log: pino({ level: 'silent' }),
  };
  return { service: new SnapshotService(deps), records, reservations, removed, released, using };
}

describe('SnapshotService', () => {
  it('a capture records the roots, the calls in flight it did not wait for, and is visible to its tenant only', async () => {
    const { service } = world();
    const snap = await service.capture('sbx_parent', alice);
    expect(snap).toMatchObject({ parentLeaseId: 'sbx_parent', manifestDigest: 'sha256:m', inFlightCalls: ['call_1'], consistent: false });
    expect(snap.roots).toEqual([
      { path: '/workspace', sizeBytes: 10, source: 'policy' },
      { path: '/testbed', sizeBytes: 5, source: 'lease' },
    ]);
    expect(snap.expiresAt).toBe('2026-01-01T01:00:00.000Z');
    await expect(service.get(snap.id, bob)).rejects.toMatchObject({ code: 'snapshot.not_found' });
    expect(await service.list(bob)).toEqual([]);
    expect((await service.source(snap.id, alice)).leaseRoots).toEqual([{ path: '/testbed', sizeBytes: 5 }]);
  });

  it("over the tenant's snapshot bytes: 429 and the image is removed again", async () => {
    const { service, removed, records } = world({ sizeBytes: 2000 });
    await expect(service.capture('sbx_parent', alice)).rejects.toMatchObject({
      code: 'quota.exceeded',
      details: { resource: 'snapshotBytes' },
    });
    expect(removed).toEqual(['sbx-snapshot:abc']);
    expect(records.size).toBe(0);
  });

  it("the roots' bytes are reserved before the capture: already over the quota, 429 and nothing is captured", async () => {
    const { service, removed, records, reservations } = world({ estimateBytes: 1500 });
    await expect(service.capture('sbx_parent', alice)).rejects.toMatchObject({
      code: 'quota.exceeded',
      details: { resource: 'snapshotBytes', used: 0, requested: 1500 },
    });
    expect(removed).toEqual([]);
    expect(records.size + reservations.size).toBe(0);
  });

  it('two captures at once near the quota: the second sees the first one’s reservation, and only one is kept', async () => {
    const { service, records, reservations } = world({ estimateBytes: 400, sizeBytes: 600 });
    const results = await Promise.allSettled([service.capture('sbx_parent', alice), service.capture('sbx_parent', alice)]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect(results.find((r) => r.status === 'rejected')).toMatchObject({ reason: { code: 'quota.exceeded' } });
    expect(records.size).toBe(1);
    expect(reservations.size).toBe(0);
  });

  it('delete is refused while a sandbox of the snapshot runs; the sweep leaves such ones alone', async () => {
    const { service, using, removed } = world();
    const snap = await service.capture('sbx_parent', alice);
    using.add('sbx-snapshot:abc');
    await expect(service.delete(snap.id, alice)).rejects.toMatchObject({ code: 'snapshot.in_use' });
    using.clear();
    await service.delete(snap.id, alice);
    expect(removed).toEqual(['sbx-snapshot:abc']);
  });

  it('fork: over the sandbox quota is 429 before anything starts; over forkMax 400; one failure releases the others', async () => {
    const quota = world({ maxSandboxes: 3 });
    const snap = await quota.service.capture('sbx_parent', alice);
    await expect(quota.service.fork(snap.id, alice, { count: 3 })).rejects.toMatchObject({ code: 'quota.exceeded' });
    const big = world({ maxSandboxes: null });
    const s2 = await big.service.capture('sbx_parent', alice);
    await expect(big.service.fork(s2.id, alice, { count: 6 })).rejects.toMatchObject({ code: 'input.invalid' });
    const failing = world({ failCreateAt: 2 });
    const s3 = await failing.service.capture('sbx_parent', alice);
    await expect(failing.service.fork(s3.id, alice, { count: 3 })).rejects.toThrow('boom');
    expect(failing.released.sort()).toEqual(['sbx_f1', 'sbx_f3']);
  });
});
