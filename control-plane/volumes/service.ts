/**
 * Persistent volumes: made per tenant with a size the kernel enforces (a filesystem of that
 * size), mounted into sandboxes at lease create, kept across leases until deleted. One writer
 * at a time unless `shared`: a read-write mount takes the volume's writer lock in Redis, held by
 * the lease until it ends by any path (release, expiry, lost, failed create). A lock is released
 * by the lease's teardown, and a hold whose lease has ended is void wherever it is checked, so a
 * crash between the two never keeps a volume locked, and a restart loses nothing.
 */
import { randomBytes } from 'node:crypto';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import { checkMountPaths } from './mounts.js';
import {
  VOLUME_MIN_BYTES,
  type CreateVolumeBody,
  type ResolvedVolumeMount,
  type Volume,
  type VolumeList,
  type VolumeMountRequest,
  type VolumeRecord,
} from './schema.js';
import type { RedisVolumeStore } from './store.js';

/** The disks behind volumes (runtime/volume-disks.ts on Docker's host). */
export interface VolumeDisks {
  /** Throws `policy.unenforceable` (the size cannot be enforced here) or `volume.create_failed`; leaves nothing when it throws. */
  create(id: string, sizeBytes: number): Promise<void>;
  /** The host directory the volume's filesystem is mounted on (mounting it if needed). */
  ensureMounted(id: string): Promise<string>;
  setRootOwner(id: string, uid: number, gid: number): Promise<void>;
  destroy(id: string): Promise<void>;
  paths(id: string): { mountPoint: string };
}

/** Whether a lease holds anything: not yet ended (`live`), ended, or without a record (`absent`). */
export type LeaseState = 'live' | 'ended' | 'absent';

export interface VolumeServiceDeps {
  store: Pick<
    RedisVolumeStore,
    'create' | 'setState' | 'get' | 'list' | 'usedBytes' | 'holders' | 'claim' | 'releaseLease' | 'beginDelete' | 'remove'
  >;
  disks: VolumeDisks;
  audit: Pick<AuditLog, 'record'>;
  /** The state of lease `id` (the composition root reads the lease store). */
  leaseState: (id: string) => Promise<LeaseState>;
  /** The tenant's `maxVolumeBytes` quota (null: no limit). */
  limitBytes: (tenant: string) => Promise<number | null>;
  now: () => Date;
}

export interface VolumeServiceOptions {
  /** The largest volume, bytes (`SBX_VOLUME_MAX_BYTES`). */
  maxSizeBytes: number;
}

/**
 * A hold whose lease has no record yet is kept this long, ms: a create claims its volumes just
 * before it writes the lease record.
 */
const UNRECORDED_GRACE_MS = 60_000;

/** A volume still `creating` after this long was left by a process that died mid-create; a delete may remove it, ms. */
const CREATE_ABANDONED_MS = 10 * 60_000;

export class VolumeService {
  constructor(
    private readonly deps: VolumeServiceDeps,
    private readonly options: VolumeServiceOptions,
  ) {}

  /**
   * Creates `by`'s tenant's volume and its disk, and records `volume.create` in the audit log.
   * Throws `volume.size_out_of_range`, `volume.exists`, `quota.exceeded` (resource
   * `volumeBytes`), `policy.unenforceable`, `volume.create_failed`; nothing is left when it throws.
   */
  async create(body: CreateVolumeBody, by: Principal): Promise<Volume> {
    const { store, disks } = this.deps;
    const max = this.options.maxSizeBytes;
    if (body.sizeBytes < VOLUME_MIN_BYTES || body.sizeBytes > max)
      throw new AppError('volume.size_out_of_range', `sizeBytes must be from ${VOLUME_MIN_BYTES} to ${max}, not ${body.sizeBytes}`, {
        details: { field: 'sizeBytes', min: VOLUME_MIN_BYTES, max, requested: body.sizeBytes },
      });
    const record: VolumeRecord = {
      id: `vol_${randomBytes(10).toString('hex')}`,
      tenant: by.tenant,
      name: body.name,
      sizeBytes: body.sizeBytes,
      shared: body.shared ?? false,
      state: 'creating',
      createdAt: this.deps.now().toISOString(),
      createdBy: by.keyId,
    };
    const made = await store.create(record, await this.deps.limitBytes(by.tenant));
    if (!made.made && made.reason === 'exists')
      throw new AppError('volume.exists', `volume ${body.name} exists`, { details: { name: body.name } });
    if (!made.made && made.reason === 'quota') {
      const details = { tenant: by.tenant, resource: 'volumeBytes', limit: made.limit, used: made.used, requested: body.sizeBytes };
      throw new AppError(
        'quota.exceeded',
        `tenant ${by.tenant} would exceed its volumeBytes quota: ${made.used} used + ${body.sizeBytes} requested > ${made.limit}`,
        { details },
      );
    }
    try {
      await disks.create(record.id, record.sizeBytes);
    } catch (err) {
      await store.remove(record);
      throw err;
    }
    await store.setState(by.tenant, body.name, 'ready');
    const ready = { ...record, state: 'ready' as const };
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'volume.create',
      target: `volume:${record.id}`,
      beforeDigest: null,
      afterDigest: digestOf(viewOf(ready)),
      details: { tenant: by.tenant, name: record.name, sizeBytes: record.sizeBytes, shared: record.shared },
    });
    return viewOf(ready);
  }

  /** `by`'s tenant's volumes, the bytes they take and the tenant's limit. */
  async list(by: Principal): Promise<VolumeList> {
    const [records, usedBytes, limitBytes] = await Promise.all([
      this.deps.store.list(by.tenant),
      this.deps.store.usedBytes(by.tenant),
      this.deps.limitBytes(by.tenant),
    ]);
    return { volumes: records.map(viewOf), usedBytes, limitBytes };
  }

  /** One volume of `by`'s tenant with the live sandboxes that have it mounted. Throws `volume.not_found`. */
  async get(name: string, by: Principal): Promise<Volume> {
    const record = await this.find(by.tenant, name);
    const { live } = await this.holds(record);
    return { ...viewOf(record), mounts: live };
  }

  /**
   * Deletes `by`'s tenant's volume, its content and its disk, and records `volume.delete`.
   * Throws `volume.not_found`, and `volume.in_use` while a sandbox that has not ended has it mounted.
   */
  async delete(name: string, by: Principal): Promise<{ name: string; deleted: true }> {
    const record = await this.find(by.tenant, name, { deleting: true });
    const { stale } = await this.holds(record);
    const begun = await this.deps.store.beginDelete(record, stale);
    if (!begun.begun && begun.reason === 'in_use')
      throw new AppError('volume.in_use', `volume ${name} is mounted by ${begun.holders.join(', ')}`, {
        details: { name, leases: begun.holders },
      });
    if (!begun.begun) throw notFound(name);
    await this.deps.disks.destroy(record.id);
    await this.deps.store.remove(record);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'volume.delete',
      target: `volume:${record.id}`,
      beforeDigest: digestOf(viewOf(record)),
      afterDigest: null,
      details: { tenant: by.tenant, name },
    });
    return { name, deleted: true };
  }

  /**
   * A lease's volume mounts, checked before anything is made: paths (against `taken`, the paths
   * the policy mounts), each volume the tenant's and ready, and no other live writer where this
   * one would write (checked again, atomically, by `claim`). Throws what `checkMountPaths`
   * throws, `volume.not_found`, `volume.writer_conflict`.
   */
  async resolveMounts(tenant: string, requests: readonly VolumeMountRequest[], taken: readonly string[]): Promise<ResolvedVolumeMount[]> {
    checkMountPaths(requests, taken);
    const resolved: ResolvedVolumeMount[] = [];
    for (const r of requests) {
      const record = await this.find(tenant, r.name);
      const readOnly = r.readOnly ?? false;
      if (!readOnly && !record.shared) {
        const writer = (await this.holds(record)).live.find((h) => !h.readOnly);
        if (writer) throw writerConflict(r.name, writer.leaseId);
      }
      resolved.push({
        volumeId: record.id,
        name: record.name,
        shared: record.shared,
        hostPath: this.deps.disks.paths(record.id).mountPoint,
        containerPath: r.path,
        readOnly,
      });
    }
    return resolved;
  }

  /**
   * Takes lease `leaseId`'s holds on its volumes (the writer lock of each read-write mount of a
   * volume that is not shared), mounts their disks if a reboot unmounted them, and gives each
   * read-write volume's root to the tool user. All or nothing: on a throw the lease holds none.
   * Throws `volume.writer_conflict`, `volume.not_found` (deleted since the plan), `policy.unenforceable`.
   */
  async claim(
    leaseId: string,
    tenant: string,
    mounts: readonly ResolvedVolumeMount[],
    toolUser: { uid: number; gid: number },
  ): Promise<void> {
    try {
      for (const m of mounts) {
        const record = await this.find(tenant, m.name);
        if (record.id !== m.volumeId) throw notFound(m.name);
        const { stale } = await this.holds(record);
        const claimed = await this.deps.store.claim(record, leaseId, m.readOnly, this.deps.now().getTime(), stale);
        if (!claimed.claimed && claimed.reason === 'conflict') throw writerConflict(m.name, claimed.holder);
        if (!claimed.claimed) throw notFound(m.name);
        await this.deps.disks.ensureMounted(record.id);
        if (!m.readOnly) await this.deps.disks.setRootOwner(record.id, toolUser.uid, toolUser.gid);
      }
    } catch (err) {
      await this.release(leaseId);
      throw err;
    }
  }

  /** Drops every hold of lease `leaseId` (its writer locks included). Idempotent; teardown calls it on every way a lease ends. */
  async release(leaseId: string): Promise<void> {
    await this.deps.store.releaseLease(leaseId);
  }

  /**
   * The tenant's volume if it is ready. For a delete, also one a delete began (and did not
   * finish), and one whose create has not finished in CREATE_ABANDONED_MS (its process died).
   */
  private async find(tenant: string, name: string, options: { deleting?: boolean } = {}): Promise<VolumeRecord> {
    const record = await this.deps.store.get(tenant, name);
    if (record?.state === 'ready') return record;
    const abandoned = record?.state === 'creating' && this.deps.now().getTime() - Date.parse(record.createdAt) > CREATE_ABANDONED_MS;
    if (record && options.deleting && (record.state === 'deleting' || abandoned)) return record;
    throw notFound(name);
  }

  /** The volume's holds, split: of live leases (with the mode), and of ended leases (void). */
  private async holds(record: VolumeRecord): Promise<{ live: Array<{ leaseId: string; readOnly: boolean }>; stale: string[] }> {
    const live: Array<{ leaseId: string; readOnly: boolean }> = [];
    const stale: string[] = [];
    const nowMs = this.deps.now().getTime();
    for (const [leaseId, hold] of await this.deps.store.holders(record.id)) {
      const state = await this.deps.leaseState(leaseId);
      if (state === 'ended' || (state === 'absent' && nowMs - hold.atMs > UNRECORDED_GRACE_MS)) stale.push(leaseId);
      else live.push({ leaseId, readOnly: hold.readOnly });
    }
    return { live, stale };
  }
}

function viewOf(record: VolumeRecord): Volume {
  return { name: record.name, sizeBytes: record.sizeBytes, shared: record.shared, state: record.state, createdAt: record.createdAt };
}

function notFound(name: string): AppError {
  return new AppError('volume.not_found', `no volume ${name}`, { details: { name } });
}

function writerConflict(name: string, leaseId: string): AppError {
  return new AppError('volume.writer_conflict', `volume ${name} is mounted read-write by sandbox ${leaseId}, and it is not shared`, {
    details: { name, leaseId },
  });
}
