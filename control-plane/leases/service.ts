/**
 * The lease use cases: create (plan → quota → record → container or warm sandbox → agent hello
 * → manifest), read, renew, release; warm sandboxes for the pools; expiry and reconcile (their
 * own files). States and every transition: machine.ts; each is a compare-and-swap on the lease
 * record that appends a lease event, so of several control-plane processes exactly one makes
 * each. The runtime's labels, the lease records and the durable expiry timers in Redis are the
 * sources of truth; no in-process map is, so a crash loses nothing: work a dead process left
 * half-done (a create, a release) is found by its `inProgressBy` process's missing liveness key
 * and finished or undone.
 *
 * Teardown is idempotent and runs every step even when one fails.
 */
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import { TERMINAL_LEASE_STATUSES, type Lease, type LeaseEvent } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { CredentialInjection } from '../egress/credentials.js';
import type { EgressProxy } from '../egress/proxy.js';
import { seesTenant, type Principal } from '../http/auth.js';
import type { LeaseMetrics } from '../metrics/service.js';
import type { PolicyService } from '../policies/service.js';
import type { WarmLaunched } from '../pools/schema.js';
import type { WarmPools } from '../pools/warm-pools.js';
import type { QuotaService } from '../quotas/service.js';
import type { DurableTimers, TimerOutcome } from '../redis/timers.js';
import type { ImageService } from '../images/service.js';
import type { SandboxRuntime } from '../runtime/runtime.js';
import type { SecretService } from '../secrets/service.js';
import type { VolumeService } from '../volumes/service.js';
import type { SnapshotSource } from '../snapshots/schema.js';
import { LeaseCreator } from './create.js';
import { LeaseEnder } from './ending.js';
import { checkUsable } from './machine.js';
import { LeaseExpiry } from './expiry.js';
import { LeasePolicyChanger } from './policy-change.js';
import { LeasePauser, type Checkpoint } from './pause.js';
import { LeasePlanner, type PlannerOptions } from './plan.js';
import type { LeaseCalls, LeaseLink } from './ports.js';
import { Provisioner, type ProvisionerOptions } from './provision.js';
import { Reconciler, type ReconcileOutcome } from './reconcile.js';
import type { CreateSandboxBody } from './schema.js';
import { toView, type LeaseRecord, type LeaseStore } from './store.js';
import { Teardown } from './teardown.js';
import { LeaseTransitions } from './transitions.js';

export type { ReconcileOutcome } from './reconcile.js';

/** What the lifecycle is set with; the provisioner's settings as provision.ts describes them. */
export interface LeaseServiceOptions extends PlannerOptions, Pick<ProvisionerOptions, 'redisPrefix' | 'helloTimeoutMs' | 'bootGate'> {
  /**
   * How long a release waits, after it cancelled the calls still running, for their agent to
   * report them ended, ms. Calls still open then end `effect_unknown`. Default 10 000.
   */
  cancelWaitMs?: number;
  /** How long an ended lease's records (calls, events, receipts) stay readable, seconds. */
  retentionSeconds: number;
}

export interface LeaseServiceDeps {
  runtime: Pick<
    SandboxRuntime,
    | 'info'
    | 'inspectImage'
    | 'readImageFiles'
    | 'start'
    | 'exited'
    | 'remove'
    | 'listOwned'
    | 'pause'
    | 'unpause'
    | 'checkpointSupport'
    | 'checkpoint'
  >;
  store: Pick<
    LeaseStore,
    | 'createLease'
    | 'transitionLease'
    | 'getLease'
    | 'listLeases'
    | 'leaseEvents'
    | 'claimIdempotencyKey'
    | 'releaseIdempotencyKey'
    | 'claimOnce'
  >;
  /** The per-lease channel to the agents (the parts the lifecycle uses). */
  link: LeaseLink;
  /** Durable expiry timers (BullMQ delayed jobs), one per lease. */
  expiry: Pick<DurableTimers, 'set' | 'ensure' | 'clear'>;
  /** Starts the retention clock of everything an ended lease recorded. */
  retain: (leaseId: string, seconds: number) => Promise<void>;
  policies: Pick<PolicyService, 'resolve'>;
  audit: Pick<AuditLog, 'record'>;
  calls: LeaseCalls;
  /** Serves the egress proxy of leases whose policy network mode is `allowlist`. */
  egress: Pick<EgressProxy, 'serve' | 'stop' | 'update' | 'basisOf'>;
  /** Credential injection: placeholders, the lease CA, what the egress proxy intercepts. */
  credentials: Pick<CredentialInjection, 'placeholder' | 'prepare' | 'interception'>;
  /** Values of the secrets a lease is granted, for its agent only. */
  secrets: Pick<SecretService, 'reveal'>;
  /** Resolves (and pulls) the image a lease names; without it, only images on the engine are used. */
  images?: Pick<ImageService, 'resolve'>;
  /** The tenant's share a lease holds from before it is created until it has ended. */
  quotas: Pick<QuotaService, 'reserve' | 'release'>;
  metrics: LeaseMetrics;
  /** Warm pools a lease may claim a started sandbox from (none: every lease starts cold). */
  pools?: Pick<WarmPools, 'claim' | 'owns' | 'settle'>;
  /** Persistent volumes leases may mount (none: a lease asking for one is refused as `policy.unenforceable`). */
  volumes?: Pick<VolumeService, 'resolveMounts' | 'claim' | 'release'>;
  /** Resolves the `snapshot` of a create body for its tenant (snapshots/); none: such creates are refused. */
  snapshots?: { source(id: string, by: Principal): Promise<SnapshotSource> };
  /** Told when reconcile has decided a lease is lost (`ReconcilerDeps.onLost`). */
  onLost?: (leaseId: string) => void;
  now: () => Date;
  log: Logger;
}

export class LeaseService {
  private readonly transitions: LeaseTransitions;
  private readonly planner: LeasePlanner;
  private readonly provisioner: Provisioner;
  private readonly teardown: Teardown;
  private readonly ender: LeaseEnder;
  private readonly reconciler: Reconciler;
  private readonly expiry: LeaseExpiry;
  private readonly creator: LeaseCreator;
  private readonly pauser: LeasePauser;
  private readonly policyChanger: LeasePolicyChanger;

  constructor(
    private readonly deps: LeaseServiceDeps,
    options: LeaseServiceOptions,
  ) {
    const { runtime, store, link, now, log } = deps;
    this.transitions = new LeaseTransitions(store, link.liveness.processId, now);
    this.planner = new LeasePlanner(deps, options);
    this.provisioner = new Provisioner(
      { runtime, acl: link.acl, handshake: link.handshake, returns: link.returns, egress: deps.egress, credentials: deps.credentials },
      options,
    );
    this.teardown = new Teardown(
      {
        runtime,
        returns: link.returns,
        agentCalls: link.calls,
        link,
        calls: deps.calls,
        egress: deps.egress,
        store,
        audit: deps.audit,
        ...(deps.volumes ? { volumes: deps.volumes } : {}),
        log,
      },
      options,
    );
    this.ender = new LeaseEnder(
      { ...deps, transitions: this.transitions, provisioner: this.provisioner, teardown: this.teardown, liveness: link.liveness },
      options,
    );
    this.reconciler = new Reconciler(
      {
        ...deps,
        transitions: this.transitions,
        ender: this.ender,
        teardown: this.teardown,
        provisioner: this.provisioner,
        returns: link.returns,
        acl: link.acl,
      },
      options.ownership,
    );
    this.expiry = new LeaseExpiry({ store, ender: this.ender, now });
    this.pauser = new LeasePauser({ ...deps, transitions: this.transitions });
    this.policyChanger = new LeasePolicyChanger({
      ...deps,
      transitions: this.transitions,
      provisioner: this.provisioner,
      usable: (l) => this.usable(l),
    });
    this.creator = new LeaseCreator(
      {
        ...deps,
        processId: link.liveness.processId,
        transitions: this.transitions,
        planner: this.planner,
        provisioner: this.provisioner,
        teardown: this.teardown,
        ender: this.ender,
      },
      options.ownership.owner,
      (id) => this.discardWarm(id),
    );
  }

  /**
   * Leases a sandbox for `by`'s tenant (leases/create.ts). With `idempotencyKey` (scoped to the
   * tenant), the same key and body return the same sandbox (`replayed: true`); the same key
   * with another body throws `lease.idempotency_conflict`. Throws what `LeasePlanner.plan`
   * throws, `quota.exceeded` and `lease.create_failed`. Every check comes before anything is created.
   */
  create(body: CreateSandboxBody, by: Principal, idempotencyKey?: string): Promise<{ lease: Lease; replayed: boolean }> {
    return this.creator.create(body, by, idempotencyKey);
  }

  /** Frees an Idempotency-Key of `by`'s tenant, so a retry with it starts afresh. */
  forgetIdempotencyKey(idempotencyKey: string, by: Principal): Promise<void> {
    return this.creator.forgetIdempotencyKey(idempotencyKey, by);
  }

  /**
   * Starts a sandbox for a warm pool: leased to nobody yet, under `policy` (its latest version)
   * and `image`, with a lease id it keeps when claimed. The pool records it; null, nothing made,
   * when no boot slot is spare; on failure everything made is torn down and the error thrown.
   */
  async launchWarm(id: string, policy: { name: string }, image: string): Promise<WarmLaunched | null> {
    const plan = await this.planner.plan(id, { policy, image, labels: {} });
    try {
      const launched = await this.provisioner.launchPooled(id, plan);
      return launched && { ...launched, ref: plan.ref, image: plan.image, imageId: plan.imageConfig.id };
    } catch (err) {
      await this.teardown.run(id, null);
      throw err;
    }
  }

  /** Removes a pooled sandbox that no lease claimed (shrinking, failed health check). */
  async discardWarm(id: string): Promise<void> {
    const failures = await this.teardown.run(id, null);
    if (failures.length > 0) this.deps.log.warn({ sandboxId: id, failures: failures.map(String) }, 'pooled sandbox teardown incomplete');
  }

  /**
   * The lease as the API shows it to `by`. Throws `lease.not_found`, also for another tenant's
   * lease when `by` is a user key.
   */
  async get(id: string, by: Principal): Promise<Lease> {
    return toView(await this.visible(id, by));
  }

  /**
   * The lease's status transitions, oldest first (`GET /v1/sandboxes/:id/events`). Throws
   * `lease.not_found` as `get`.
   */
  async events(id: string, by: Principal): Promise<LeaseEvent[]> {
    await this.visible(id, by);
    return this.deps.store.leaseEvents(id);
  }

  /** Whether lease `id` exists and `by` may see it (routes that reach a lease's records by another id use it). */
  async canSee(id: string, by: Principal): Promise<boolean> {
    const lease = await this.deps.store.getLease(id);
    return lease !== null && seesTenant(by, lease.tenant);
  }

  /** The leases `by` may see, newest first: its tenant's for a user key, all for an admin key. */
  async list(by: Principal): Promise<Lease[]> {
    return (await this.deps.store.listLeases()).filter((l) => seesTenant(by, l.tenant)).map(toView);
  }

  /**
   * The lease record if `by` may see it; another tenant's is `lease.not_found`, exactly like a
   * missing one. (The lease guard of sandbox routes: http/lease-guard.ts.)
   */
  async visible(id: string, by: Principal): Promise<LeaseRecord> {
    const lease = await this.deps.store.getLease(id);
    if (!lease || !seesTenant(by, lease.tenant)) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return lease;
  }

  /**
   * The lease record if calls and files of `by` may use it now. Throws `lease.not_found` (also
   * for another tenant's lease), `lease.expired` (also a ready lease past its `expiresAt` whose
   * timer is about to end it), `lease.released` (also for failed and lost leases),
   * `lease.not_ready` (pending, starting, releasing).
   */
  async active(id: string, by: Principal): Promise<LeaseRecord> {
    return this.usable(await this.visible(id, by));
  }

  /** `lease` if calls and files may use it now; throws as `active` (machine.ts `checkUsable`). */
  usable(lease: LeaseRecord): LeaseRecord {
    return checkUsable(lease, this.deps.now().getTime());
  }

  /**
   * Renews a ready lease: its new `expiresAt` is now + `ttlSeconds` (earlier than before is
   * allowed: a client may shorten its lease), and its durable timer moves with it. The bound is
   * on the lease's whole life: `expiresAt − createdAt` may not exceed the policy's
   * `maxTtlSeconds`, so renewing cannot keep a sandbox past what its policy allows. Throws
   * `lease.ttl_exceeds_policy` (details: `max`, `maxExpiresAt`), `lease.not_found`,
   * `lease.expired`, `lease.released`, `lease.not_ready`.
   */
  async renew(id: string, by: Principal, ttlSeconds: number): Promise<Lease> {
    await this.visible(id, by);
    const renewed = await this.transitions.apply(id, { type: 'renew', ttlSeconds });
    const refusal = renewed.refusal;
    if (refusal?.reason === 'ttl_exceeds_policy') {
      throw new AppError(
        'lease.ttl_exceeds_policy',
        `the lease may live until ${refusal.maxExpiresAt} (policy maxTtlSeconds ${refusal.maxTtlSeconds} from its creation); ttlSeconds ${ttlSeconds} goes past that`,
        {
          details: {
            field: 'ttlSeconds',
            max: refusal.maxTtlSeconds,
            maxExpiresAt: refusal.maxExpiresAt,
            remainingSeconds: refusal.remainingSeconds,
          },
        },
      );
    }
    if (!renewed.applied) {
      if (!renewed.lease) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
      this.usable(renewed.lease);
      // Ready again between the two reads cannot be: a renewal only applies to a ready lease.
      throw new AppError('lease.not_ready', `sandbox ${id} changed while it was renewed; read it and try again`);
    }
    const lease = renewed.lease!;
    await this.deps.expiry.set(id, Date.parse(lease.expiresAt));
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'lease.renew',
      target: `lease:${id}`,
      beforeDigest: lease.manifest?.digest ?? null,
      afterDigest: lease.manifest?.digest ?? null,
      details: { tenant: lease.tenant, ttlSeconds, expiresAt: lease.expiresAt },
    });
    return toView(lease);
  }

  /**
   * Releases the sandbox for `by`. Calls still running get up to `graceMs` to finish, then are
   * cancelled through the agent (each ends as the agent reports it, typically `cancelled` with
   * a receipt); what they sent is ledgered; then the container, its volumes and network, its
   * queues and Redis credentials go. Calls, events and receipts stay. Idempotent: a second
   * release, also one arriving while the first is in progress, answers the same final record.
   * Throws `lease.not_found` (also for another tenant's lease), and `lease.not_ready` while it
   * is being created.
   */
  async release(id: string, by: Principal, graceMs = 0): Promise<Lease> {
    await this.visible(id, by);
    const begun = await this.ender.begin(id, 'released', actorOf(by), graceMs);
    if (begun.applied) return this.ender.finish(begun.lease);
    const lease = begun.lease;
    if (TERMINAL_LEASE_STATUSES.has(lease.status)) return toView(lease);
    if (lease.status === 'releasing') return this.ender.awaitEnded(lease);
    // Its creation owns it until it is ready or has failed (and cleaned up after itself).
    throw new AppError('lease.not_ready', `sandbox ${id} is still being created; release it once it is ready`, {
      details: { status: lease.status },
    });
  }

  /**
   * Pauses the sandbox: every process frozen, calls and files `409 lease.paused` until resumed;
   * its running TTL stops and the pause budget runs (leases/pause.ts). Idempotent. Throws
   * `lease.not_found`, `policy.pause_denied`, `lease.expired`/`lease.released` (410),
   * `lease.not_ready`, `runtime.unavailable`.
   */
  async pause(id: string, by: Principal): Promise<Lease> {
    return this.pauser.pause(await this.visible(id, by), by);
  }

  /** Resumes a paused sandbox where it was (leases/pause.ts). Idempotent. Throws as `pause` (not `policy.pause_denied`). */
  async resume(id: string, by: Principal): Promise<Lease> {
    return this.pauser.resume(await this.visible(id, by), by);
  }

  /**
   * A memory checkpoint of a running sandbox where the engine supports it; else
   * `policy.unenforceable` (leases/pause.ts). Throws the `active` codes too.
   */
  async checkpoint(id: string, by: Principal): Promise<Checkpoint> {
    return this.pauser.checkpoint(await this.visible(id, by), by);
  }

  /** Moves a sandbox to its policy's phase `name` (leases/policy-change.ts; its codes, and the `active` ones). */
  async movePhase(id: string, by: Principal, name: string): Promise<Lease> {
    return this.policyChanger.movePhase(await this.visible(id, by), name, by);
  }

  /** Moves a running sandbox to `version` of its policy (leases/policy-change.ts; its codes, and the `active` ones). */
  async changePolicy(id: string, by: Principal, version: number): Promise<Lease> {
    // Seen first: another tenant's key learns nothing of the lease, not even that it needs an admin.
    const lease = await this.visible(id, by);
    if (by.role !== 'admin')
      throw new AppError('auth.admin_required', 'moving a sandbox to another policy version needs an admin API key', {
        details: { role: by.role },
      });
    return this.policyChanger.changePolicy(lease, version, by);
  }

  /** Handles the lease's expiry timer when it falls due (leases/expiry.ts). */
  onExpiryTimer(id: string): Promise<TimerOutcome> {
    return this.expiry.onTimer(id);
  }

  /** One reconcile run (leases/reconcile.ts). */
  reconcile(): Promise<ReconcileOutcome> {
    return this.reconciler.run();
  }
}
