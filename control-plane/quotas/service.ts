/**
 * Tenant quotas: how many sandboxes, CPUs and bytes of memory one tenant's leases may hold at
 * once. A lease reserves its share before anything of it is created and releases it when it
 * ends (or fails to start); `reconcile` repairs what a crash in between left.
 *
 * Limits: what an admin PUT for the tenant, field by field over the default
 * (`SBX_DEFAULT_TENANT_QUOTA`); a field that is null, or absent from both, is no limit.
 */
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import type { EffectiveLimits, QuotaLimits, QuotaRequest, TenantQuota } from './schema.js';
import type { RedisQuotaStore, Refusal } from './store.js';

export interface QuotaServiceDeps {
  store: Pick<RedisQuotaStore, 'getLimits' | 'putLimits' | 'usage' | 'reserve' | 'release' | 'reservations'>;
  audit: Pick<AuditLog, 'record'>;
  /** Limits of tenants an admin configured none for (`SBX_DEFAULT_TENANT_QUOTA`). */
  defaults: QuotaLimits;
  now: () => Date;
}

/** A lease as `reconcile` needs to see it: absent (null), or its tenant, status and resources. */
export interface LeaseHold {
  tenant: string;
  /** Whether the lease has ended (released, expired, failed): it holds nothing any more. */
  ended: boolean;
  cpus: number;
  memoryBytes: number;
}

/** A reservation whose lease record is missing is left alone this long (its create may be about to write it), ms. */
const ORPHAN_GRACE_MS = 60_000;

const FIELD_NAMES: Record<Refusal['field'], 'sandboxes' | 'cpus' | 'memoryBytes'> = {
  sandboxes: 'sandboxes',
  milliCpus: 'cpus',
  memoryBytes: 'memoryBytes',
};

export class QuotaService {
  constructor(private readonly deps: QuotaServiceDeps) {}

  /** The tenant's limits in force, what was configured for it, and its usage now. */
  async get(tenant: string): Promise<TenantQuota> {
    const [configured, usage] = await Promise.all([this.deps.store.getLimits(tenant), this.deps.store.usage(tenant)]);
    return {
      tenant,
      limits: this.effective(configured),
      configured,
      usage: { sandboxes: usage.sandboxes, cpus: usage.milliCpus / 1000, memoryBytes: usage.memoryBytes },
    };
  }

  /**
   * Sets the tenant's limits (replacing what was configured; `{}` returns it to the default) and
   * records `quota.put` in the audit log. Leases already running are never stopped: a limit
   * below the current use only refuses new leases until enough end.
   */
  async put(tenant: string, limits: QuotaLimits, by: Principal): Promise<TenantQuota> {
    const before = await this.deps.store.getLimits(tenant);
    await this.deps.store.putLimits(tenant, limits);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'quota.put',
      target: `tenant:${tenant}`,
      beforeDigest: before === null ? null : digestOf(before),
      afterDigest: digestOf(limits),
      details: { limits },
    });
    return this.get(tenant);
  }

  /**
   * Reserves one sandbox with `request`'s CPUs and memory of `tenant`'s quota for `leaseId`,
   * atomically against concurrent reservations. Idempotent per lease. Throws `quota.exceeded`
   * (429; details: tenant, resource `sandboxes`|`cpus`|`memoryBytes`, limit, used, requested).
   */
  async reserve(leaseId: string, tenant: string, request: QuotaRequest): Promise<void> {
    const limits = this.effective(await this.deps.store.getLimits(tenant));
    const refusal = await this.deps.store.reserve(leaseId, holdOf(tenant, request, this.deps.now()), {
      maxSandboxes: limits.maxSandboxes ?? -1,
      maxMilliCpus: limits.maxCpus === null ? -1 : Math.round(limits.maxCpus * 1000),
      maxMemoryBytes: limits.maxMemoryBytes ?? -1,
    });
    if (!refusal) return;
    const resource = FIELD_NAMES[refusal.field];
    const scale = refusal.field === 'milliCpus' ? 1000 : 1;
    const requested = resource === 'sandboxes' ? 1 : resource === 'cpus' ? request.cpus : request.memoryBytes;
    const details = { tenant, resource, limit: refusal.limit / scale, used: refusal.used / scale, requested };
    throw new AppError(
      'quota.exceeded',
      `tenant ${tenant} would exceed its ${resource} quota: ${details.used} used + ${requested} requested > ${details.limit}`,
      { details },
    );
  }

  /** The tenant's limit on its volumes' bytes (`maxVolumeBytes`; null: none). The volumes domain counts and checks it. */
  async volumeLimitBytes(tenant: string): Promise<number | null> {
    return this.effective(await this.deps.store.getLimits(tenant)).maxVolumeBytes;
  }

  /** Releases what `leaseId` holds; a lease that holds nothing (released before) is fine. */
  async release(leaseId: string): Promise<void> {
    await this.deps.store.release(leaseId);
  }

  /**
   * Makes the reservations agree with the leases: a reservation of an ended lease, or of a lease
   * with no record for ORPHAN_GRACE_MS (a create that died between reserving and writing it),
   * is released; a live lease in `liveIds` without one (made before quotas, or whose release
   * raced this) is counted without a limit check, since it runs already. `leaseOf` reads a
   * lease (null when absent). Returns what it changed.
   */
  async reconcile(
    liveIds: readonly string[],
    leaseOf: (id: string) => Promise<LeaseHold | null>,
  ): Promise<{ released: string[]; adopted: string[] }> {
    const outcome = { released: [] as string[], adopted: [] as string[] };
    const reservations = await this.deps.store.reservations();
    const nowMs = this.deps.now().getTime();
    for (const [id, reservation] of reservations) {
      const lease = await leaseOf(id);
      const orphan = lease === null && nowMs - reservation.atMs > ORPHAN_GRACE_MS;
      if ((orphan || lease?.ended) && (await this.deps.store.release(id))) outcome.released.push(id);
    }
    for (const id of liveIds) {
      if (reservations.has(id)) continue;
      const lease = await leaseOf(id);
      if (!lease || lease.ended) continue;
      const unlimited = { maxSandboxes: -1, maxMilliCpus: -1, maxMemoryBytes: -1 };
      if ((await this.deps.store.reserve(id, holdOf(lease.tenant, lease, this.deps.now()), unlimited)) === null) outcome.adopted.push(id);
    }
    return outcome;
  }

  private effective(configured: QuotaLimits | null): EffectiveLimits {
    const pick = <K extends keyof EffectiveLimits>(key: K): number | null => {
      const own = configured?.[key];
      return own !== undefined ? own : (this.deps.defaults[key] ?? null);
    };
    return {
      maxSandboxes: pick('maxSandboxes'),
      maxCpus: pick('maxCpus'),
      maxMemoryBytes: pick('maxMemoryBytes'),
      maxVolumeBytes: pick('maxVolumeBytes'),
    };
  }
}

function holdOf(tenant: string, request: QuotaRequest, at: Date): { tenant: string; milliCpus: number; memoryBytes: number; atMs: number } {
  return { tenant, milliCpus: Math.round(request.cpus * 1000), memoryBytes: request.memoryBytes, atMs: at.getTime() };
}
