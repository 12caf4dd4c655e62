import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { Principal } from '../http/auth.js';
import type { VolumeRecord } from './schema.js';
import { VolumeService, type LeaseState, type VolumeDisks, type VolumeServiceDeps } from './service.js';
import type { MountHold } from './store.js';

const MiB = 1024 * 1024;
const alice: Principal = { keyId: 'key_a', role: 'user', tenant: 'alice' };
const bob: Principal = { keyId: 'key_b', role: 'user', tenant: 'bob' };

/** The store's contract in memory: the same outcomes as the Lua scripts, one step at a time. */
class FakeStore {
  records = new Map<string, VolumeRecord>();
  mounts = new Map<string, Map<string, MountHold>>();
  byLease = new Map<string, Set<string>>();
  key = (tenant: string, name: string): string => `${tenant}/${name}`;
  async create(record: VolumeRecord, limit: number | null) {
    if (this.records.has(this.key(record.tenant, record.name))) return { made: false as const, reason: 'exists' as const };
    const used = await this.usedBytes(record.tenant);
    if (limit !== null && used + record.sizeBytes > limit) return { made: false as const, reason: 'quota' as const, limit, used };
    this.records.set(this.key(record.tenant, record.name), { ...record, state: 'creating' });
    return { made: true as const };
  }
  async setState(tenant: string, name: string, state: VolumeRecord['state']) {
    this.records.get(this.key(tenant, name))!.state = state;
  }
  async get(tenant: string, name: string) {
    return this.records.get(this.key(tenant, name)) ?? null;
  }
  async list(tenant: string) {
    return [...this.records.values()].filter((r) => r.tenant === tenant);
  }
  async usedBytes(tenant: string) {
    return (await this.list(tenant)).reduce((n, r) => n + r.sizeBytes, 0);
  }
  async holders(id: string) {
    return new Map(this.mounts.get(id) ?? []);
  }
  async claim(record: VolumeRecord, leaseId: string, readOnly: boolean, atMs: number, stale: readonly string[]) {
    const current = this.records.get(this.key(record.tenant, record.name));
    if (current?.state !== 'ready' || current.id !== record.id) return { claimed: false as const, reason: 'not_found' as const };
    const holds = this.mounts.get(record.id) ?? new Map<string, MountHold>();
    for (const s of stale) holds.delete(s);
    if (!readOnly && !current.shared) {
      const writer = [...holds].find(([id, h]) => id !== leaseId && !h.readOnly);
      if (writer) return { claimed: false as const, reason: 'conflict' as const, holder: writer[0] };
    }
    holds.set(leaseId, { readOnly, atMs });
    this.mounts.set(record.id, holds);
    this.byLease.set(leaseId, new Set([...(this.byLease.get(leaseId) ?? []), record.id]));
    return { claimed: true as const };
  }
  async releaseLease(leaseId: string) {
    for (const id of this.byLease.get(leaseId) ?? []) this.mounts.get(id)?.delete(leaseId);
    this.byLease.delete(leaseId);
  }
  async beginDelete(record: VolumeRecord, stale: readonly string[]) {
    const holds = this.mounts.get(record.id) ?? new Map<string, MountHold>();
    for (const s of stale) holds.delete(s);
    if (holds.size > 0) return { begun: false as const, reason: 'in_use' as const, holders: [...holds.keys()] };
    this.records.get(this.key(record.tenant, record.name))!.state = 'deleting';
    return { begun: true as const };
  }
  async remove(record: VolumeRecord) {
    this.records.delete(this.key(record.tenant, record.name));
    this.mounts.delete(record.id);
  }
}

class FakeDisks implements VolumeDisks {
  made = new Set<string>();
  owners = new Map<string, string>();
  failCreate: AppError | null = null;
  failMount = false;
  async create(id: string) {
    if (this.failCreate) throw this.failCreate;
    this.made.add(id);
  }
  async ensureMounted(id: string) {
    if (this.failMount) throw new AppError('policy.unenforceable', 'no loop device');
    return `/disks/${id}`;
  }
  async setRootOwner(id: string, uid: number, gid: number) {
    this.owners.set(id, `${uid}:${gid}`);
  }
  async destroy(id: string) {
    this.made.delete(id);
  }
  paths(id: string) {
    return { mountPoint: `/disks/${id}` };
  }
}

function setup(options: { limit?: number | null } = {}) {
  const store = new FakeStore();
  const disks = new FakeDisks();
  const leases = new Map<string, LeaseState>();
  let nowMs = Date.parse('2026-01-01T00:00:00Z');
  const audit: Array<{ action: string }> = [];
  const deps: VolumeServiceDeps = {
    store,
    disks,
    audit: { record: async (e) => (audit.push({ action: e.action }), { ...e, id: '1', at: '' }) as never },
    leaseState: async (id) => leases.get(id) ?? 'absent',
    limitBytes: async () => options.limit ?? null,
    now: () => new Date(nowMs),
  };
  const service = new VolumeService(deps, { maxSizeBytes: 1024 * MiB });
  return { service, store, disks, leases, audit, advance: (ms: number) => (nowMs += ms) };
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'none';
  } catch (err) {
    if (err instanceof AppError) return err.code;
    throw err;
  }
}

const mount = (name: string, readOnly = false) => [{ name, path: '/vol', readOnly }];

describe('VolumeService', () => {
  it('creates a disk per volume, audited; names are per tenant; sizes and the quota are checked first', async () => {
    const { service, disks, audit } = setup({ limit: 40 * MiB });
    expect(await service.create({ name: 'cache', sizeBytes: 32 * MiB }, alice)).toMatchObject({ name: 'cache', state: 'ready' });
    expect(await codeOf(service.create({ name: 'cache', sizeBytes: 16 * MiB }, alice))).toBe('volume.exists');
    expect(await codeOf(service.create({ name: 'more', sizeBytes: 16 * MiB }, alice))).toBe('quota.exceeded');
    expect(await service.create({ name: 'cache', sizeBytes: 16 * MiB }, bob)).toMatchObject({ name: 'cache' });
    for (const sizeBytes of [0, -1, MiB, 2048 * MiB])
      expect(await codeOf(service.create({ name: 'x', sizeBytes }, alice))).toBe('volume.size_out_of_range');
    expect(disks.made.size).toBe(2);
    expect(audit.map((a) => a.action)).toEqual(['volume.create', 'volume.create']);
    expect(await codeOf(service.get('cache', { ...bob, tenant: 'carol' }))).toBe('volume.not_found');
  });

  it('a disk that cannot be made leaves no record', async () => {
    const { service, store, disks } = setup();
    disks.failCreate = new AppError('policy.unenforceable', 'not root');
    expect(await codeOf(service.create({ name: 'v', sizeBytes: 16 * MiB }, alice))).toBe('policy.unenforceable');
    expect(store.records.size).toBe(0);
  });

  it('one writer: a live writer refuses another, readers pass; an ended writer is void; shared takes any number', async () => {
    const { service, leases, disks } = setup();
    await service.create({ name: 'v', sizeBytes: 16 * MiB }, alice);
    await service.create({ name: 's', sizeBytes: 16 * MiB, shared: true }, alice);
    const user = { uid: 1000, gid: 1000 };
    const plan = (name: string, readOnly = false) => service.resolveMounts('alice', mount(name, readOnly), ['/workspace']);
    leases.set('l1', 'live');
    await service.claim('l1', 'alice', await plan('v'), user);
    expect(disks.owners.get([...disks.made][0]!)).toBe('1000:1000');
    expect(await codeOf(plan('v'))).toBe('volume.writer_conflict');
    // The plan's check is not the lock: a read-write claim is checked again (here, after a read-only plan).
    const planned = await plan('v', true);
    expect(await codeOf(service.claim('l2', 'alice', [{ ...planned[0]!, readOnly: false }], user))).toBe('volume.writer_conflict');
    await service.claim('l3', 'alice', await plan('v', true), user);
    leases.set('l1', 'ended');
    leases.set('l3', 'live');
    await service.claim('l4', 'alice', await plan('v'), user);
    expect((await service.get('v', alice)).mounts).toEqual(
      expect.arrayContaining([
        { leaseId: 'l3', readOnly: true },
        { leaseId: 'l4', readOnly: false },
      ]),
    );
    leases.set('l4', 'live');
    await service.claim('l5', 'alice', await plan('s'), user);
    await service.claim('l6', 'alice', await plan('s'), user);
  });

  it('a hold of a lease with no record counts for a minute (its create is writing it), then is void', async () => {
    const { service, advance } = setup();
    await service.create({ name: 'v', sizeBytes: 16 * MiB }, alice);
    const user = { uid: 1000, gid: 1000 };
    await service.claim('creating', 'alice', await service.resolveMounts('alice', mount('v'), []), user);
    expect(await codeOf(service.resolveMounts('alice', mount('v'), []))).toBe('volume.writer_conflict');
    advance(61_000);
    expect(await codeOf(service.resolveMounts('alice', mount('v'), []))).toBe('none');
  });

  it('a claim that fails part-way holds nothing', async () => {
    const { service, disks, store } = setup();
    await service.create({ name: 'a', sizeBytes: 16 * MiB }, alice);
    await service.create({ name: 'b', sizeBytes: 16 * MiB }, alice);
    const mounts = await service.resolveMounts(
      'alice',
      [
        { name: 'a', path: '/a' },
        { name: 'b', path: '/b' },
      ],
      [],
    );
    disks.failMount = true;
    expect(await codeOf(service.claim('l1', 'alice', mounts, { uid: 1, gid: 1 }))).toBe('policy.unenforceable');
    expect([...store.mounts.values()].every((m) => m.size === 0)).toBe(true);
  });

  it('delete: refused while a live lease holds it, allowed once it ended; the disk goes', async () => {
    const { service, leases, disks, audit } = setup();
    await service.create({ name: 'v', sizeBytes: 16 * MiB }, alice);
    leases.set('l1', 'live');
    await service.claim('l1', 'alice', await service.resolveMounts('alice', mount('v', true), []), { uid: 1, gid: 1 });
    expect(await codeOf(service.delete('v', alice))).toBe('volume.in_use');
    expect(await codeOf(service.delete('v', bob))).toBe('volume.not_found');
    leases.set('l1', 'ended');
    expect(await service.delete('v', alice)).toEqual({ name: 'v', deleted: true });
    expect(disks.made.size).toBe(0);
    expect(audit.at(-1)!.action).toBe('volume.delete');
    expect(await codeOf(service.get('v', alice))).toBe('volume.not_found');
  });
});
