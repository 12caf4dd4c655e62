/**
 * Creating a lease: plan → quota share → record → a claimed warm sandbox (bound to the lease)
 * or a container started now → agent hello → manifest → `ready`. Each step is this process's
 * own (`inProgressBy`); on failure everything made is torn down, the lease ends `failed` and
 * the quota share goes back. An Idempotency-Key replays the lease it made.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { LEASE_ID_PREFIX, type Lease } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import { allowlistDigest } from '../egress/rules.js';
import type { Principal } from '../http/auth.js';
import { buildManifest, imageRecord } from '../manifest/manifest.js';
import type { LeaseMetrics } from '../metrics/service.js';
import type { Launched, WarmSandbox } from '../pools/schema.js';
import type { WarmPools } from '../pools/warm-pools.js';
import type { QuotaService } from '../quotas/service.js';
import type { DurableTimers } from '../redis/timers.js';
import type { VolumeService } from '../volumes/service.js';
import type { LeaseEnder } from './ending.js';
import type { LeaseMachineEvent } from './machine.js';
import type { LeasePlan, LeasePlanner } from './plan.js';
import type { Provisioner } from './provision.js';
import type { CreateSandboxBody } from './schema.js';
import type { SnapshotSource } from '../snapshots/schema.js';
import { toView, type LeaseRecord, type LeaseStore } from './store.js';
import type { Teardown } from './teardown.js';
import type { LeaseTransitions } from './transitions.js';

/** Poll period of an idempotent replay waiting for the lease another request is creating, ms. */
const REPLAY_POLL_MS = 100;

export interface CreatorDeps {
  store: Pick<LeaseStore, 'claimIdempotencyKey' | 'releaseIdempotencyKey' | 'createLease' | 'getLease'>;
  /** This process (`inProgressBy` of the leases it creates). */
  processId: string;
  transitions: LeaseTransitions;
  planner: Pick<LeasePlanner, 'plan'>;
  provisioner: Pick<Provisioner, 'launch' | 'bind'>;
  teardown: Pick<Teardown, 'run'>;
  ender: Pick<LeaseEnder, 'closeRecords'>;
  expiry: Pick<DurableTimers, 'set'>;
  quotas: Pick<QuotaService, 'reserve' | 'release'>;
  audit: Pick<AuditLog, 'record'>;
  metrics: LeaseMetrics;
  pools?: Pick<WarmPools, 'claim' | 'settle'>;
  /** Persistent volumes: a lease's holds are taken before its record is written, and given back by teardown. */
  volumes?: Pick<VolumeService, 'claim' | 'release'>;
  /** Resolves `snapshot` of a create body for its tenant (throws `snapshot.not_found`); none: snapshots are refused. */
  snapshots?: { source(id: string, by: Principal): Promise<SnapshotSource> };
  now: () => Date;
  log: Logger;
}

export class LeaseCreator {
  constructor(
    private readonly deps: CreatorDeps,
    private readonly owner: string,
    /** Removes a claimed pooled sandbox that will not be used. */
    private readonly discardWarm: (id: string) => Promise<void>,
  ) {}

  /**
   * Leases a sandbox for `by`'s tenant. With `idempotencyKey` (scoped to the tenant), the same
   * key and body return the same sandbox (`replayed: true`); the same key with another body
   * throws `lease.idempotency_conflict`. Throws what `LeasePlanner.plan` throws, `quota.exceeded`
   * and `lease.create_failed`. Every check comes before anything is created.
   */
  async create(body: CreateSandboxBody, by: Principal, idempotencyKey?: string): Promise<{ lease: Lease; replayed: boolean }> {
    const id = `${LEASE_ID_PREFIX}${randomBytes(10).toString('hex')}`;
    // Tenant names hold no `:`, so two tenants' keys can never meet (nor replay each other's sandbox).
    const scopedKey = idempotencyKey === undefined ? undefined : `${by.tenant}:${idempotencyKey}`;
    if (scopedKey !== undefined) {
      const requestDigest = digestOf(body);
      const earlier = await this.deps.store.claimIdempotencyKey(scopedKey, id, requestDigest);
      if (earlier) {
        if (earlier.requestDigest !== requestDigest) {
          throw new AppError('lease.idempotency_conflict', 'this Idempotency-Key was used with a different request body', {
            details: { leaseId: earlier.leaseId },
          });
        }
        return { lease: await this.awaitCreated(earlier.leaseId), replayed: true };
      }
    }
    try {
      return { lease: await this.createNew(id, body, by), replayed: false };
    } catch (err) {
      // A failed create leaves nothing, the key included, so a retry with it starts afresh.
      if (scopedKey !== undefined) await this.deps.store.releaseIdempotencyKey(scopedKey);
      throw err;
    }
  }

  /** Frees `idempotencyKey` of `by`'s tenant, so a retry with it starts afresh (a fork that failed after some copies started). */
  async forgetIdempotencyKey(idempotencyKey: string, by: Principal): Promise<void> {
    await this.deps.store.releaseIdempotencyKey(`${by.tenant}:${idempotencyKey}`);
  }

  private async createNew(id: string, asked: CreateSandboxBody, by: Principal): Promise<Lease> {
    let body = asked;
    let from: SnapshotSource | undefined;
    if (asked.snapshot !== undefined) {
      if (!this.deps.snapshots)
        throw new AppError('snapshot.not_found', `no snapshot ${asked.snapshot}`, { details: { id: asked.snapshot } });
      from = await this.deps.snapshots.source(asked.snapshot, by);
      body = {
        ...asked,
        image: from.imageRef,
        policy: asked.policy ?? { name: from.policy.name, version: from.policy.version },
        writableRoots: asked.writableRoots ?? from.leaseRoots,
      };
    }
    const plan = await this.deps.planner.plan(id, body, by.tenant, from);
    plan.snapshot = from ? { id: from.id, digest: from.digest, parentLeaseId: from.parentLeaseId } : null;
    try {
      // A pooled sandbox was started without the lease's own writable roots and volumes (mounts
      // are fixed at container create): none fits such a lease.
      const own = (body.writableRoots ?? []).length > 0 || from !== undefined || plan.volumes.length > 0;
      // Pools run engine images, as a plan without a tenant resolves their names: a tenant's
      // built image of the same name is not theirs to serve (nor a reason to empty them).
      const engineImage = plan.spec.image === plan.image;
      const warm = own || !engineImage ? undefined : await this.deps.pools?.claim(plan.ref, plan.image, plan.imageConfig.id);
      if (warm) {
        try {
          return await this.make(warm.id, plan, body, by, warm);
        } catch (err) {
          // Best effort: a claim left unsettled is dropped by the pool's round after a minute.
          await this.deps.pools?.settle(warm.id).catch((settleErr: unknown) => {
            this.deps.log.warn({ sandboxId: warm.id, err: settleErr }, 'claimed pooled sandbox could not be settled');
          });
          // The claimed sandbox is torn down (never reused). Over quota, the lease gets none;
          // otherwise the bind failed and it still gets one, cold.
          if (err instanceof AppError && err.code === 'quota.exceeded') {
            await this.discardWarm(warm.id);
            throw err;
          }
          this.deps.log.warn({ sandboxId: warm.id, err }, 'claimed pooled sandbox failed to bind; starting cold');
        }
      }
      return await this.make(id, plan, body, by, undefined);
    } finally {
      for (const v of plan.values.values()) v.fill(0);
    }
  }

  /**
   * Makes lease `id` from `plan`: on the claimed `warm` sandbox (bound to the lease), or on a
   * container started now. `pending` → `starting` → `ready`, each step this process's own; on
   * failure everything is torn down and the lease ends `failed`. The tenant's quota share is
   * taken before anything exists.
   */
  private async make(id: string, plan: LeasePlan, body: CreateSandboxBody, by: Principal, warm: WarmSandbox | undefined): Promise<Lease> {
    const { store, now, log } = this.deps;
    const createdAt = now();
    const record: LeaseRecord = {
      id,
      status: 'pending',
      createdAt: createdAt.toISOString(),
      expiresAt: new Date(createdAt.getTime() + plan.ttlSeconds * 1000).toISOString(),
      endedAt: null,
      endReason: null,
      image: plan.image,
      policy: plan.ref,
      manifest: null,
      labels: body.labels ?? {},
      pausedAt: null,
      runningTtlLeftMs: null,
      pausedTotalMs: 0,
      tenant: by.tenant,
      owner: this.owner,
      env: plan.env,
      policySnapshot: plan.policy,
      toolUser: plan.toolUser,
      secrets: plan.grants,
      phase: plan.policy.phases?.[0]?.name ?? null,
      manifestHistory: [],
      containerId: warm?.containerId ?? null,
      inProgressBy: this.deps.processId,
      releaseGraceUntil: null,
      endedBy: null,
    };
    await this.deps.quotas.reserve(id, by.tenant, { cpus: plan.policy.resources.cpus, memoryBytes: plan.policy.resources.memoryBytes });
    if (plan.volumes.length > 0) {
      // Atomically against other creates: a writer lock lost to a race is a 409 with nothing made.
      try {
        await this.deps.volumes!.claim(id, by.tenant, plan.volumes, plan.toolUser);
      } catch (err) {
        await this.deps.quotas.release(id);
        throw err;
      }
    }
    await store.createLease(record, warm ? 'created_from_pool' : 'created', createdAt);
    try {
      // The claimed sandbox is the lease's now, as reconcile sees it. Inside the try: a failed
      // settle tears the sandbox down and fails the lease like any failed step (it left the
      // record pending, with its quota share, for good).
      if (warm) await this.deps.pools?.settle(id);
      // The timer is in Redis before anything else exists: if this process dies from here on,
      // the lease still ends on time (or reconcile fails the create first).
      await this.deps.expiry.set(id, Date.parse(record.expiresAt));
      await this.advance(id, { type: 'start' });
      let launched: Launched;
      if (warm) {
        await this.deps.provisioner.bind(id, plan);
        launched = warm;
      } else {
        launched = await this.deps.provisioner.launch(id, plan);
      }
      const manifest = buildManifest({
        facts: launched.facts,
        image: { ...imageRecord(plan.image, plan.imageConfig), ...(plan.imageDigest === null ? {} : { digest: plan.imageDigest }) },
        engineVersion: plan.engineVersion,
        ociRuntime: plan.policy.runtime.oci,
        policy: plan.ref,
        network: {
          mode: plan.policy.network.mode,
          allowlistDigest: plan.policy.network.mode === 'allowlist' ? allowlistDigest(plan.policy.network.allow) : null,
        },
        env: plan.env,
        secretRefs: plan.grants.map((g) => g.name),
        snapshot: plan.snapshot ?? null,
        ...(plan.policy.phases?.[0] ? { phase: plan.policy.phases[0].name } : {}),
        writableRoots: plan.roots.map((r) => ({ ...r, fromImage: r.fromImage && (launched.seededPaths ?? []).includes(r.path) })),
        createdAt,
      });
      const ready = await this.advance(id, { type: 'become_ready', manifest, containerId: launched.containerId });
      await this.deps.audit.record({
        actor: actorOf(by),
        action: 'lease.create',
        target: `lease:${id}`,
        beforeDigest: null,
        afterDigest: manifest.digest,
        details: { tenant: by.tenant, policy: plan.ref, warm: warm !== undefined },
      });
      const ms = now().getTime() - createdAt.getTime();
      this.deps.metrics.leaseCreated(warm ? 'warm' : 'cold', ms / 1000);
      log.info({ sandboxId: id, policy: plan.ref, warm: warm !== undefined, ms }, 'sandbox leased');
      return toView(ready);
    } catch (err) {
      const failures = await this.deps.teardown.run(id, null);
      const code = err instanceof AppError ? err.code : 'lease.create_failed';
      const failed = await this.deps.transitions.apply(id, { type: 'fail_create', code });
      if (failed.applied) await this.deps.ender.closeRecords(id);
      await this.deps.quotas.release(id);
      log.warn({ sandboxId: id, err, teardownFailures: failures.length }, 'sandbox create failed');
      if (err instanceof AppError) throw err;
      throw new AppError('lease.create_failed', `the sandbox could not be started: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * One step of this process's create, as long as the lease is still this process's to create.
   * Throws `lease.create_failed` when it is not (another process took this one for dead and
   * failed the create).
   */
  private async advance(id: string, event: LeaseMachineEvent): Promise<LeaseRecord> {
    const moved = await this.deps.transitions.apply(id, event);
    if (!moved.applied) {
      throw new AppError('lease.create_failed', `sandbox ${id} was taken over while it started (it is ${moved.lease?.status ?? 'gone'})`, {
        details: { status: moved.lease?.status ?? null },
      });
    }
    return moved.lease!;
  }

  /** Waits for a lease another request is creating (idempotent replay), up to 60 s. */
  private async awaitCreated(id: string): Promise<Lease> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const lease = await this.deps.store.getLease(id);
      if (lease && lease.status !== 'pending' && lease.status !== 'starting') {
        if (lease.status === 'failed')
          throw new AppError('lease.create_failed', `sandbox ${id} for this Idempotency-Key failed to start`, { details: { leaseId: id } });
        return toView(lease);
      }
      if (Date.now() > deadline)
        throw new AppError('lease.not_ready', `sandbox ${id} is still being created`, { details: { leaseId: id } });
      await new Promise((r) => setTimeout(r, REPLAY_POLL_MS));
    }
  }
}
