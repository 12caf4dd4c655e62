/**
 * The snapshot use cases: capture a running sandbox, list/read/delete (tenant-scoped), fork N
 * sandboxes from one, expire by retention, and resolve a snapshot for a lease started from it.
 *
 * Calls in flight are not waited for: a capture records the ids of the calls queued or running
 * when it began (`inFlightCalls`); they go on, and their effects may be in the snapshot, partly
 * or not at all. The capture runs while the sandbox runs (only the commit of its changed files
 * pauses it), recorded as `consistent: false`.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { TERMINAL_LEASE_STATUSES, type Lease } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import { seesTenant, type Principal } from '../http/auth.js';
import type { CreateSandboxBody } from '../leases/schema.js';
import { toolUserOf, type LeaseRecord } from '../leases/store.js';
import type { QuotaService } from '../quotas/service.js';
import type { CapturedImage, Ownership, SandboxRuntime } from '../runtime/runtime.js';
import type { Snapshot, SnapshotRecord, SnapshotSettings, SnapshotSource } from './schema.js';
import type { SnapshotStore } from './store.js';

/** What snapshots need of the lease domain. */
export interface SnapshotLeases {
  visible(id: string, by: Principal): Promise<LeaseRecord>;
  create(body: CreateSandboxBody, by: Principal, idempotencyKey?: string): Promise<{ lease: Lease; replayed: boolean }>;
  /** Frees an Idempotency-Key of `by`'s tenant. */
  forgetIdempotencyKey(idempotencyKey: string, by: Principal): Promise<void>;
  release(id: string, by: Principal): Promise<unknown>;
  /** Ids of the leases not ended whose image is `imageRef`. */
  using(imageRef: string): Promise<string[]>;
}

/** How long a capture's reservation of quota bytes counts at the most (a control plane that died mid-capture), ms. */
const RESERVATION_TTL_MS = 60 * 60 * 1000;

export interface SnapshotServiceDeps {
  store: Pick<SnapshotStore, 'reserve' | 'putWithinQuota' | 'release' | 'get' | 'list' | 'delete'>;
  runtime: Pick<SandboxRuntime, 'snapshot' | 'removeSnapshot' | 'snapshotBytesEstimate'>;
  leases: SnapshotLeases;
  /** Ids of a lease's calls that have not finished. */
  openCalls: (leaseId: string) => Promise<string[]>;
  quotas: Pick<QuotaService, 'get'>;
  audit: Pick<AuditLog, 'record'>;
  ownership: Ownership;
  settings: SnapshotSettings;
  now: () => Date;
  log: Logger;
}

export class SnapshotService {
  constructor(private readonly deps: SnapshotServiceDeps) {}

  /**
   * Captures lease `leaseId` of `by`'s tenant. Throws `lease.not_found` (another tenant's, or an
   * ended sandbox: there is nothing left to capture), `lease.not_ready`, `snapshot.capture_failed`,
   * `quota.exceeded` (resource `snapshotBytes`: before the capture when the roots already hold
   * more than is left, or after it at its real size; nothing of it is kept).
   */
  async capture(leaseId: string, by: Principal, ttlSeconds?: number): Promise<Snapshot> {
    const { deps } = this;
    const lease = await deps.leases.visible(leaseId, by);
    if (TERMINAL_LEASE_STATUSES.has(lease.status)) {
      throw new AppError('lease.not_found', `sandbox ${leaseId} has ended (${lease.status}); nothing is left to snapshot`, {
        details: { id: leaseId, status: lease.status },
      });
    }
    if (lease.status !== 'ready' || !lease.manifest)
      throw new AppError('lease.not_ready', `sandbox ${leaseId} is ${lease.status}`, { details: { status: lease.status } });
    const ttl = Math.min(ttlSeconds ?? deps.settings.ttlSeconds, deps.settings.ttlSeconds);
    const roots =
      lease.manifest.writableRoots.length > 0
        ? lease.manifest.writableRoots.map((r) => ({ path: r.path, sizeBytes: r.sizeBytes, source: r.source }))
        : lease.policySnapshot.filesystem.writableRoots.map((r) => ({ path: r.path, sizeBytes: r.sizeBytes, source: 'policy' as const }));
    const id = `snap_${randomBytes(10).toString('hex')}`;
    const inFlightCalls = await deps.openCalls(leaseId);
    const user = toolUserOf(lease);
    const paths = roots.map((r) => r.path);
    // The quota is reserved before the capture (an estimate: what the roots hold now) and checked
    // again, atomically with the record's write, at the capture's real size (store.ts).
    const estimate = await deps.runtime.snapshotBytesEstimate(leaseId, paths).catch(() => 0);
    const startedMs = deps.now().getTime();
    const held = await deps.store.reserve(id, lease.tenant, estimate, deps.settings.quotaBytes, startedMs, startedMs + RESERVATION_TTL_MS);
    if (held !== null) throw this.overQuota(lease.tenant, held, estimate);
    let image: CapturedImage | null = null;
    let record: SnapshotRecord;
    try {
      image = await deps.runtime.snapshot({
        leaseId,
        ownership: deps.ownership,
        roots: paths,
        user: { uid: user.uid, gid: user.gid },
        labels: {
          'sbx.snapshot.id': id,
          'sbx.snapshot.tenant': lease.tenant,
          'sbx.snapshot.parent': leaseId,
          'sbx.snapshot.manifest': lease.manifest.digest,
        },
      });
      const now = deps.now();
      record = {
        id,
        digest: image.digest,
        imageRef: image.ref,
        sizeBytes: image.sizeBytes,
        parentLeaseId: leaseId,
        manifestDigest: lease.manifest.digest,
        policy: lease.policy,
        sourceImage: lease.image,
        roots,
        inFlightCalls,
        consistent: false,
        tenant: lease.tenant,
        createdAt: now.toISOString(),
        expiresAt: new Date(now.getTime() + ttl * 1000).toISOString(),
      };
      const used = await deps.store.putWithinQuota(record, deps.settings.quotaBytes, now.getTime());
      if (used !== null) throw this.overQuota(lease.tenant, used, image.sizeBytes);
    } catch (err) {
      // Nothing is left of a capture that failed or did not fit: neither its reservation nor its image.
      await deps.store.release(id).catch(() => undefined);
      if (image) await deps.runtime.removeSnapshot(image.ref).catch(() => undefined);
      throw err;
    }
    await deps.audit.record({
      actor: actorOf(by),
      action: 'snapshot.create',
      target: `snapshot:${id}`,
      beforeDigest: null,
      afterDigest: digestOf(record),
      details: { tenant: lease.tenant, parentLeaseId: leaseId, sizeBytes: record.sizeBytes, inFlightCalls: inFlightCalls.length },
    });
    deps.log.info(
      { sandboxId: leaseId, snapshotId: id, sizeBytes: record.sizeBytes, inFlightCalls: inFlightCalls.length },
      'snapshot taken',
    );
    return view(record);
  }

  /** `by`'s tenant's snapshots (every tenant's for an admin key), oldest first, expired ones left out. */
  async list(by: Principal): Promise<Snapshot[]> {
    const now = this.deps.now().toISOString();
    return (await this.deps.store.list()).filter((s) => seesTenant(by, s.tenant) && s.expiresAt > now).map(view);
  }

  /** Throws `snapshot.not_found` (also for another tenant's, or an expired one). */
  async get(id: string, by: Principal): Promise<Snapshot> {
    return view(await this.visible(id, by));
  }

  /** Deletes the snapshot and its image. Throws `snapshot.not_found`, `snapshot.in_use` (a sandbox started from it runs). */
  async delete(id: string, by: Principal): Promise<void> {
    const record = await this.visible(id, by);
    await this.remove(record);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'snapshot.delete',
      target: `snapshot:${id}`,
      beforeDigest: digestOf(record),
      afterDigest: null,
      details: { tenant: record.tenant },
    });
  }

  /**
   * Starts `count` sandboxes from snapshot `id`, all or none: when one fails, those started are
   * released and the first error is thrown. Throws `snapshot.not_found`, `quota.exceeded` (more
   * than the tenant's sandbox quota leaves, before anything starts), `input.invalid` (count over
   * `forkMax`), and what a create throws.
   */
  async fork(id: string, by: Principal, body: ForkRequest): Promise<Lease[]> {
    return (await this.startMany(id, by, body)).sandboxes;
  }

  /**
   * `fork`, with an Idempotency-Key (`POST /v1/sandboxes {snapshot, count}`): copy i is created
   * under `<key>#<i>/<count>`, so the same request again answers the same sandboxes
   * (`replayed: true` when every copy was replayed) and another count is another request; on
   * failure every key taken is freed with the copies released. Throws as `fork`.
   */
  async startMany(
    id: string,
    by: Principal,
    body: ForkRequest,
    idempotencyKey?: string,
  ): Promise<{ sandboxes: Lease[]; replayed: boolean }> {
    const record = await this.visible(id, by);
    const quota = await this.deps.quotas.get(record.tenant);
    const max = quota.limits.maxSandboxes;
    if (max !== null && quota.usage.sandboxes + body.count > max) {
      throw new AppError(
        'quota.exceeded',
        `tenant ${record.tenant} would exceed its sandboxes quota: ${quota.usage.sandboxes} used + ${body.count} requested > ${max}`,
        { details: { tenant: record.tenant, resource: 'sandboxes', limit: max, used: quota.usage.sandboxes, requested: body.count } },
      );
    }
    if (body.count > this.deps.settings.forkMax) {
      throw new AppError('input.invalid', `count ${body.count} is above the most one fork starts (${this.deps.settings.forkMax})`, {
        details: { issues: [{ path: 'count', message: `at most ${this.deps.settings.forkMax}` }] },
      });
    }
    const create: CreateSandboxBody = {
      snapshot: id,
      ...(body.ttlSeconds !== undefined ? { ttlSeconds: body.ttlSeconds } : {}),
      ...(body.labels ? { labels: body.labels } : {}),
    };
    const keys = Array.from({ length: body.count }, (_, i) =>
      idempotencyKey === undefined ? undefined : `${idempotencyKey}#${i}/${body.count}`,
    );
    const results = await Promise.allSettled(keys.map((key) => this.deps.leases.create(create, by, key)));
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      // Only what this request started goes (and its key); a replayed copy belongs to the earlier request.
      const fresh = results.flatMap((r, i) =>
        r.status === 'fulfilled' && !r.value.replayed ? [{ lease: r.value.lease, key: keys[i] }] : [],
      );
      await Promise.allSettled(fresh.map((m) => this.deps.leases.release(m.lease.id, by)));
      await Promise.allSettled(fresh.flatMap((m) => (m.key === undefined ? [] : [this.deps.leases.forgetIdempotencyKey(m.key, by)])));
      throw failed.reason;
    }
    return { sandboxes: made.map((m) => m.lease), replayed: made.every((m) => m.replayed) };
  }

  /** What a lease started from snapshot `id` needs. Throws `snapshot.not_found`. */
  async source(id: string, by: Principal): Promise<SnapshotSource> {
    const r = await this.visible(id, by);
    return {
      id: r.id,
      digest: r.digest,
      parentLeaseId: r.parentLeaseId,
      imageRef: r.imageRef,
      policy: r.policy,
      leaseRoots: r.roots.filter((x) => x.source === 'lease').map((x) => ({ path: x.path, sizeBytes: x.sizeBytes })),
      capturedRoots: r.roots.map((x) => x.path),
    };
  }

  /** Deletes expired snapshots no sandbox uses (those in use go once their sandboxes end). Returns the ids deleted. */
  async sweep(): Promise<string[]> {
    const now = this.deps.now().toISOString();
    const deleted: string[] = [];
    for (const record of await this.deps.store.list()) {
      if (record.expiresAt > now) continue;
      try {
        await this.remove(record);
        deleted.push(record.id);
      } catch (err) {
        if (!(err instanceof AppError && err.code === 'snapshot.in_use'))
          this.deps.log.warn({ snapshotId: record.id, err }, 'snapshot expiry failed');
      }
    }
    return deleted;
  }

  private async remove(record: SnapshotRecord): Promise<void> {
    const using = await this.deps.leases.using(record.imageRef);
    if (using.length > 0) {
      throw new AppError('snapshot.in_use', `snapshot ${record.id} is used by ${using.length} running sandbox(es)`, {
        details: { id: record.id, leases: using },
      });
    }
    await this.deps.runtime.removeSnapshot(record.imageRef);
    await this.deps.store.delete(record.id);
  }

  /** `quota.exceeded` (resource `snapshotBytes`): `used` bytes held, `requested` more asked for. */
  private overQuota(tenant: string, used: number, requested: number): AppError {
    const limit = this.deps.settings.quotaBytes;
    return new AppError(
      'quota.exceeded',
      `tenant ${tenant} would exceed its snapshotBytes quota: ${used} used + ${requested} requested > ${limit}`,
      { details: { tenant, resource: 'snapshotBytes', limit, used, requested } },
    );
  }

  private async visible(id: string, by: Principal): Promise<SnapshotRecord> {
    const record = await this.deps.store.get(id);
    if (!record || !seesTenant(by, record.tenant) || record.expiresAt <= this.deps.now().toISOString())
      throw new AppError('snapshot.not_found', `no snapshot ${id}`, { details: { id } });
    return record;
  }
}

/** What a fork asks for: how many copies (1 to `forkMax`), their TTL and labels. */
export interface ForkRequest {
  count: number;
  ttlSeconds?: number;
  labels?: Record<string, string>;
}

function view(record: SnapshotRecord): Snapshot {
  const { imageRef: _ref, ...rest } = record;
  return rest;
}
