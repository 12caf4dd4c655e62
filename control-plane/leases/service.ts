/**
 * Lease lifecycle: create (policy → spec → container → agent hello → manifest), read, renew,
 * release, expire, and reconcile with the runtime. States: `pending` → `starting` → `ready` →
 * `releasing` → `released`, or `expired`, `failed`, `lost` (contract/objects.ts). Every change
 * of state is a compare-and-swap on the lease record in the ledger that appends a lease event,
 * so of several control-plane processes exactly one makes each transition. The runtime's
 * labels, the ledger and the durable expiry timers in Redis are the sources of truth; no
 * in-process map is, so a crash loses nothing: work a dead process left half-done (a create, a
 * release) is found by its `inProgressBy` process's missing liveness key and finished or undone.
 *
 * Teardown is idempotent and runs every step even when one fails.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, realpath, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { TERMINAL_LEASE_STATUSES, type Lease, type LeaseEvent, type LeaseStatus, type PolicyRef, type SandboxFacts } from '../../contract/objects.js';
import type { AgentConfig, SecretGrant } from '../../contract/queue.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { AuditActor } from '../audit/schema.js';
import { deliveryAad, seal, type SecretDelivery } from '../../contract/secrets.js';
import type { CallService } from '../calls/service.js';
import { seesTenant, type Principal } from '../http/auth.js';
import type { Ledger, LeaseRecord, LeaseTransition } from '../ledger/ledger.js';
import { buildManifest } from '../manifest/manifest.js';
import type { EgressProxy } from '../egress/proxy.js';
import { allowlistDigest } from '../egress/rules.js';
import { agentEgress, compileSandboxSpec, type CompileInput, AGENT_REDIS_DIR, AGENT_SPOOL_DIR, EGRESS_SOCKET_NAME } from '../policies/compiler.js';
import type { Policy } from '../policies/schema.js';
import type { PolicyService } from '../policies/service.js';
import type { ExpiryOutcome, ExpiryTimers } from '../queue/expiry-timers.js';
import type { LeaseMetrics } from '../metrics/service.js';
import type { WarmPools } from '../pools/warm-pools.js';
import type { LeaseChannels } from '../queue/lease-channels.js';
import type { QuotaService } from '../quotas/service.js';
import type { OwnedSandbox, Ownership, SandboxRuntime, SandboxSpec } from '../runtime/runtime.js';
import type { SecretService } from '../secrets/service.js';
import type { CreateSandboxBody, SecretRequest } from './schema.js';

export interface LeaseServiceOptions {
  /**
   * `SBX_OWNER` and this installation's id: written on everything this service creates, and
   * the only things reconcile, reaping and teardown ever list or remove.
   */
  ownership: Ownership;
  sbxVersion: string;
  dataDir: string;
  defaultImage: string;
  /** Host path of the Redis unix socket agents connect to. */
  agentRedisSocket: string;
  redisPrefix: string;
  /** How long a new sandbox's agent has to report ready, ms. Default 30 000. */
  helloTimeoutMs?: number;
  /**
   * How long a release waits, after it cancelled the calls still running, for their agent to
   * report them ended (the process group killed: SIGTERM, then SIGKILL after the call's
   * `killGraceMs`), ms. Calls still open then end `effect_unknown`. Default 10 000.
   */
  cancelWaitMs?: number;
  /** How long an ended lease's records (calls, events, receipts) stay readable, seconds. */
  retentionSeconds: number;
  /** Host directories read-only mounts may come from (`SBX_MOUNT_ALLOWLIST`). */
  mountAllowlist: readonly string[];
  /** Host paths no read-only mount may contain: the data dir, the Docker and Redis sockets. */
  protectedHostPaths: readonly string[];
}

export interface LeaseServiceDeps {
  runtime: SandboxRuntime;
  ledger: Ledger;
  channels: LeaseChannels;
  /** Durable expiry timers (BullMQ delayed jobs), one per lease. */
  expiry: Pick<ExpiryTimers, 'set' | 'ensure' | 'clear'>;
  policies: Pick<PolicyService, 'resolve'>;
  audit: Pick<AuditLog, 'record'>;
  calls: CallService;
  /** Serves the egress proxy of leases whose policy network mode is `allowlist`. */
  egress: EgressProxy;
  /** Values of the secrets a lease is granted, for its agent only. */
  secrets: Pick<SecretService, 'reveal'>;
  /** The tenant's share a lease holds from before it is created until it has ended. */
  quotas: Pick<QuotaService, 'reserve' | 'release'>;
  metrics: LeaseMetrics;
  /** Warm pools a lease may claim a started sandbox from (none: every lease starts cold). */
  pools?: Pick<WarmPools, 'claim' | 'owns' | 'settle'>;
  now: () => Date;
  log: Logger;
}

/** Why a lease ends (its `endReason` while `releasing`), and what that makes of it. */
type EndReason = 'released' | 'expired' | 'container_missing' | 'container_exited';
const ENDINGS: Record<EndReason, { status: LeaseStatus; action: string; settleCalls: boolean }> = {
  // Calls get their grace and are then cancelled through the agent, which reports how each ended.
  released: { status: 'released', action: 'lease.release', settleCalls: true },
  expired: { status: 'expired', action: 'lease.expire', settleCalls: true },
  // No agent is left to cancel anything: open calls end `effect_unknown` (or `cancelled` if never started).
  container_missing: { status: 'lost', action: 'lease.lost', settleCalls: false },
  container_exited: { status: 'lost', action: 'lease.lost', settleCalls: false },
};

/** What one reconcile run did, by lease id. */
export interface ReconcileOutcome {
  /** Ready leases with a running container, whose returns (and egress) this process now serves if no live process did. */
  adopted: string[];
  /** Leases whose container, volumes or network were removed: no lease record, or an ended lease's leftovers. */
  removed: string[];
  /** Ready leases whose container is gone or stopped, now `lost`. */
  lost: string[];
  /** Creates whose control-plane process died, now `failed` (`create_interrupted`). */
  failed: string[];
  /** Releases whose control-plane process died, finished here. */
  resumed: string[];
}

export class LeaseService {
  constructor(
    private readonly deps: LeaseServiceDeps,
    private readonly options: LeaseServiceOptions,
  ) {}

  /**
   * Leases a sandbox for `by`'s tenant. With `idempotencyKey` (scoped to the tenant), the same
   * key and body return the same sandbox (`replayed: true`); the same key with another body
   * throws `lease.idempotency_conflict`. Throws `policy.not_found`, `policy.unenforceable`,
   * `lease.ttl_exceeds_policy`, `input.invalid`, `policy.secret_denied` (a secret the policy
   * does not allow; details.name), `secret.not_found`, `secret.unreadable`,
   * `policy.mount_not_allowed`, `runtime.image_not_found`, `runtime.unavailable`,
   * `lease.create_failed`. Every check comes before anything is created.
   */
  async create(body: CreateSandboxBody, by: Principal, idempotencyKey?: string): Promise<{ lease: Lease; replayed: boolean }> {
    const id = `sbx_${randomBytes(10).toString('hex')}`;
    // Tenant names hold no `:`, so two tenants' keys can never meet (nor replay each other's sandbox).
    const scopedKey = idempotencyKey === undefined ? undefined : `${by.tenant}:${idempotencyKey}`;
    if (scopedKey !== undefined) {
      const requestDigest = digestOf(body);
      const earlier = await this.deps.ledger.claimIdempotencyKey(scopedKey, id, requestDigest);
      if (earlier) {
        if (earlier.requestDigest !== requestDigest) {
          throw new AppError('lease.idempotency_conflict', 'this Idempotency-Key was used with a different request body', { details: { leaseId: earlier.leaseId } });
        }
        return { lease: await this.awaitCreated(earlier.leaseId), replayed: true };
      }
    }
    try {
      return { lease: await this.createNew(id, body, by), replayed: false };
    } catch (err) {
      // A failed create leaves nothing, the key included, so a retry with it starts afresh.
      if (scopedKey !== undefined) await this.deps.ledger.releaseIdempotencyKey(scopedKey);
      throw err;
    }
  }

  /**
   * Everything a lease needs decided before anything is made: the policy version, TTL, env,
   * secret grants and values, image, and the compiled container spec. Throws the create errors.
   */
  private async plan(id: string, body: CreateSandboxBody): Promise<LeasePlan> {
    const { runtime, policies } = this.deps;
    const policyName = typeof body.policy === 'string' ? body.policy : (body.policy?.name ?? 'default');
    const policyVersion = typeof body.policy === 'object' ? body.policy.version : undefined;
    // The version and its snapshot are fixed here: a later PUT or DELETE of the policy never reaches this lease.
    const { policy, ref } = await policies.resolve(policyName, policyVersion);
    const ttlSeconds = body.ttlSeconds ?? policy.resources.ttlSeconds;
    if (ttlSeconds > policy.resources.maxTtlSeconds) {
      throw new AppError('lease.ttl_exceeds_policy', `ttlSeconds ${ttlSeconds} is above the policy's maxTtlSeconds ${policy.resources.maxTtlSeconds}`, {
        details: { field: 'ttlSeconds', max: policy.resources.maxTtlSeconds },
      });
    }
    const env = body.env ?? {};
    const refused = policy.envAllowlist.length === 0 ? [] : Object.keys(env).filter((k) => !policy.envAllowlist.includes(k));
    if (refused.length > 0) {
      throw new AppError('input.invalid', `env names not allowed by policy ${ref.name}: ${refused.join(', ')}`, { details: { field: 'env', refused } });
    }
    const grants = (body.secrets ?? []).map(grantOf);
    const denied = grants.find((g) => !policy.secrets.allowed.includes(g.name));
    if (denied) {
      throw new AppError('policy.secret_denied', `policy ${ref.name} does not allow secret ${denied.name}`, { details: { name: denied.name, policy: ref.name, field: 'secrets' } });
    }
    const values = await this.deps.secrets.reveal(grants.map((g) => g.name));
    const image = body.image ?? this.options.defaultImage;
    const [info, imageId] = await Promise.all([runtime.info(), runtime.imageId(image)]);
    const spec = compileSandboxSpec({
      leaseId: id,
      ownership: this.options.ownership,
      sbxVersion: this.options.sbxVersion,
      image,
      policy,
      policyRef: ref,
      agentConfigHostDir: this.credentialsDir(id),
      agentRedisSocketDir: dirname(this.options.agentRedisSocket),
      egressSocketHostDir: this.egressDir(id),
      mounts: await resolveMounts(policy, this.options.mountAllowlist, this.options.protectedHostPaths),
      ociRuntimes: info.ociRuntimes,
      labels: body.labels ?? {},
    });
    return { policy, ref, ttlSeconds, env, grants, values, image, imageId, engineVersion: info.engineVersion, spec };
  }

  private async createNew(id: string, body: CreateSandboxBody, by: Principal): Promise<Lease> {
    const plan = await this.plan(id, body);
    try {
      const warm = await this.deps.pools?.claim(plan.ref, plan.image);
      if (warm) {
        try {
          return await this.make(warm.id, plan, body, by, warm);
        } catch (err) {
          await this.deps.pools?.settle(warm.id);
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
    const { ledger, channels, now, log } = this.deps;
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
      tenant: by.tenant,
      owner: this.options.ownership.owner,
      env: plan.env,
      policySnapshot: plan.policy,
      secrets: plan.grants,
      containerId: warm?.containerId ?? null,
      inProgressBy: channels.processId,
      releaseGraceUntil: null,
      endedBy: null,
    };
    await this.deps.quotas.reserve(id, by.tenant, { cpus: plan.policy.resources.cpus, memoryBytes: plan.policy.resources.memoryBytes });
    await ledger.createLease(record, warm ? 'created_from_pool' : 'created', createdAt);
    // The claimed sandbox is the lease's now, as reconcile sees it.
    if (warm) await this.deps.pools?.settle(id);
    try {
      // The timer is in Redis before anything else exists: if this process dies from here on,
      // the lease still ends on time (or reconcile fails the create first).
      await this.deps.expiry.set(id, Date.parse(record.expiresAt));
      await this.advance(id, 'pending', (l) => ({ record: { ...l, status: 'starting' }, reason: 'starting' }));
      let launched: Launched;
      if (warm) {
        await this.bindWarm(id, plan);
        launched = warm;
      } else {
        launched = await this.launch(id, plan, { pooled: false });
      }
      const manifest = buildManifest({
        facts: launched.facts,
        image: { ref: plan.image, id: plan.imageId },
        engineVersion: plan.engineVersion,
        ociRuntime: plan.policy.runtime.oci,
        policy: plan.ref,
        network: { mode: plan.policy.network.mode, allowlistDigest: plan.policy.network.mode === 'allowlist' ? allowlistDigest(plan.policy.network.allow) : null },
        env: plan.env,
        secretRefs: plan.grants.map((g) => g.name),
        createdAt,
      });
      const ready = await this.advance(id, 'starting', (l) => ({ record: { ...l, status: 'ready', manifest, containerId: launched.containerId, inProgressBy: null }, reason: 'ready' }));
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
      const failures = await this.teardown(id, null);
      const code = err instanceof AppError ? err.code : 'lease.create_failed';
      const failed = await this.transition(id, (l) =>
        l.status === 'pending' || l.status === 'starting' ? { record: { ...l, status: 'failed', endedAt: now().toISOString(), endReason: 'create_failed', inProgressBy: null }, reason: 'create_failed', details: { code } } : null,
      );
      if (failed.applied) await this.closeRecords(id);
      await this.deps.quotas.release(id);
      log.warn({ sandboxId: id, err, teardownFailures: failures.length }, 'sandbox create failed');
      if (err instanceof AppError) throw err;
      throw new AppError('lease.create_failed', `the sandbox could not be started: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * Starts the container of `id` from `plan` and waits for its agent's hello. With `pooled`,
   * the agent starts without the lease's env and secrets, to be bound later (`bindWarm`).
   * Throws `lease.create_failed` (the agent died or never said hello) and runtime errors;
   * what it made is the caller's to tear down.
   */
  private async launch(id: string, plan: LeasePlan, { pooled }: { pooled: boolean }): Promise<Launched> {
    const { runtime, channels } = this.deps;
    const credsPath = join(this.credentialsDir(id), 'agent.json');
    const creds = await channels.provisionAgentUser(id);
    const deliveryKey = !pooled && plan.grants.length > 0 ? await this.deliverSecrets(id, plan.grants, plan.values) : null;
    const agentConfig: AgentConfig = {
      leaseId: id,
      rootPrefix: this.options.redisPrefix,
      redis: { path: `${AGENT_REDIS_DIR}/${this.options.agentRedisSocket.split('/').pop()}`, ...creds },
      toolUser: plan.policy.runtime.toolUser,
      workdir: '/workspace',
      env: pooled ? {} : plan.env,
      files: { roots: plan.policy.filesystem.writableRoots.map((r) => r.path), maxFileBytes: plan.policy.tools.files.maxFileBytes },
      spool: { dir: AGENT_SPOOL_DIR, maxArtifactBytes: plan.policy.tools.exec.maxArtifactBytes, maxTotalBytes: plan.policy.tools.exec.maxSpoolBytes },
      egress: agentEgress(plan.policy),
      secrets: { grants: pooled ? [] : plan.grants, deliveryKey },
      pooled,
    };
    await mkdir(dirname(credsPath), { recursive: true, mode: 0o700 });
    await writeFile(credsPath, JSON.stringify(agentConfig), { mode: 0o400 });
    await this.consumeReturns(id, plan.policy);
    const { containerId } = await runtime.start(plan.spec);
    // The agent says hello, or its container stops first (a crashed agent: fail now, with its
    // last words, rather than after the hello timeout).
    const helloArrived = new AbortController();
    const died = runtime.exited(id, helloArrived.signal).then(({ exitCode, logTail }) => {
      if (helloArrived.signal.aborted) return undefined as never;
      throw new AppError('lease.create_failed', `the sandbox agent exited (code ${exitCode ?? '?'}) before it was ready: ${logTail.slice(-500) || 'no output'}`, {
        details: { exitCode, agentLog: logTail.slice(-2000) },
      });
    });
    died.catch(() => undefined);
    const hello = await Promise.race([channels.awaitHello(id, this.options.helloTimeoutMs ?? 30_000), died]).finally(() => helloArrived.abort());
    // The agent holds its credentials now; removing the file keeps them out of reach of
    // anything that reads the sandbox's filesystem later (files API included).
    await rm(credsPath, { force: true });
    return { containerId, facts: hello.facts };
  }

  /**
   * Starts a sandbox for a warm pool: leased to nobody yet, under `policy` (its latest version)
   * and `image`, with a lease id it keeps when claimed. The pool records it; on failure
   * everything made is torn down and the error thrown.
   */
  async launchWarm(id: string, policy: { name: string }, image: string): Promise<Launched & { ref: PolicyRef; image: string }> {
    const plan = await this.plan(id, { policy, image, labels: {} });
    try {
      return { ...(await this.launch(id, plan, { pooled: true })), ref: plan.ref, image: plan.image };
    } catch (err) {
      await this.teardown(id, null);
      throw err;
    }
  }

  /** Removes a pooled sandbox that no lease claimed (shrinking, failed health check). */
  async discardWarm(id: string): Promise<void> {
    const failures = await this.teardown(id, null);
    if (failures.length > 0) this.deps.log.warn({ sandboxId: id, failures: failures.map(String) }, 'pooled sandbox teardown incomplete');
  }

  /**
   * Gives a claimed pooled sandbox its lease's env and secrets (job `BIND_JOB`, acknowledged on
   * `bound`). Throws `lease.create_failed` when the agent does not take it in BIND_TIMEOUT_MS.
   */
  private async bindWarm(id: string, plan: LeasePlan): Promise<void> {
    // The process that filled the pool may be gone: whoever consumes the returns serves egress.
    await this.consumeReturns(id, plan.policy);
    const deliveryKey = plan.grants.length > 0 ? await this.deliverSecrets(id, plan.grants, plan.values) : null;
    // A ready agent takes its binding in milliseconds; one that does not in time is not waited
    // for longer (the lease starts cold instead).
    const ack = await this.deps.channels.bind(id, { env: plan.env, secrets: { grants: plan.grants, deliveryKey } }, BIND_TIMEOUT_MS);
    if (!ack.ok) throw new AppError('lease.create_failed', `the pooled sandbox did not take its lease: ${ack.error}`, { details: { sandboxId: id } });
  }

  /**
   * One step of this process's create: `from` → what `step` makes of it, as long as the lease
   * is still this process's to create. Throws `lease.create_failed` when it is not (another
   * process took this one for dead and failed the create).
   */
  private async advance(id: string, from: LeaseStatus, step: (lease: LeaseRecord) => LeaseTransition): Promise<LeaseRecord> {
    const moved = await this.transition(id, (l) => (l.status === from && l.inProgressBy === this.deps.channels.processId ? step(l) : null));
    if (!moved.applied) {
      throw new AppError('lease.create_failed', `sandbox ${id} was taken over while it started (it is ${moved.lease?.status ?? 'gone'})`, { details: { status: moved.lease?.status ?? null } });
    }
    return moved.lease!;
  }

  /**
   * Leaves the granted values for the lease's agent in its namespace, each sealed (AES-256-GCM)
   * under a fresh key of this lease alone, bound to the lease and the name. The key goes in the
   * agent's config file, so the values never lie in clear on disk or in Redis; the agent takes
   * them once, and they expire by themselves if it never does. Zeroes the key afterwards (best
   * effort; `createNew` zeroes the values once the lease is made or has failed).
   * Returns the key, base64.
   */
  private async deliverSecrets(leaseId: string, grants: readonly SecretGrant[], values: Map<string, Buffer>): Promise<string> {
    const key = randomBytes(32);
    try {
      const delivery: SecretDelivery = { items: grants.map((g) => ({ name: g.name, sealed: seal(key, deliveryAad(leaseId, g.name), values.get(g.name)!) })) };
      await this.deps.channels.leaveSecretDelivery(leaseId, delivery, (this.options.helloTimeoutMs ?? 30_000) + 30_000);
      return key.toString('base64');
    } finally {
      key.fill(0);
    }
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
    return this.deps.ledger.leaseEvents(id);
  }

  /** Whether lease `id` exists and `by` may see it (routes that reach a lease's records by another id use it). */
  async canSee(id: string, by: Principal): Promise<boolean> {
    const lease = await this.deps.ledger.getLease(id);
    return lease !== null && seesTenant(by, lease.tenant);
  }

  /** The leases `by` may see, newest first: its tenant's for a user key, all for an admin key. */
  async list(by: Principal): Promise<Lease[]> {
    return (await this.deps.ledger.listLeases()).filter((l) => seesTenant(by, l.tenant)).map(toView);
  }

  /**
   * The lease record if calls and files of `by` may use it now. Throws `lease.not_found` (also
   * for another tenant's lease), `lease.expired` (also a ready lease past its `expiresAt` whose
   * timer is about to end it), `lease.released` (also for failed and lost leases),
   * `lease.not_ready` (pending, starting, releasing).
   */
  async active(id: string, by: Principal): Promise<LeaseRecord> {
    const lease = await this.visible(id, by);
    const due = lease.status === 'ready' && Date.parse(lease.expiresAt) <= this.deps.now().getTime();
    if (due || lease.status === 'expired') {
      throw new AppError('lease.expired', `sandbox ${id} expired at ${lease.expiresAt}`, { details: { expiresAt: lease.expiresAt } });
    }
    switch (lease.status) {
      case 'ready':
        return lease;
      case 'released':
      case 'failed':
      case 'lost':
        throw new AppError('lease.released', `sandbox ${id} was released (${lease.endReason ?? lease.status})`, { details: { status: lease.status, endReason: lease.endReason } });
      default:
        throw new AppError('lease.not_ready', `sandbox ${id} is ${lease.status}`, { details: { status: lease.status } });
    }
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
    const renewed = await this.transition(id, (l) => {
      const nowMs = this.deps.now().getTime();
      if (l.status !== 'ready' || Date.parse(l.expiresAt) <= nowMs) return null;
      const maxMs = Date.parse(l.createdAt) + l.policySnapshot.resources.maxTtlSeconds * 1000;
      const expiresAtMs = nowMs + ttlSeconds * 1000;
      if (expiresAtMs > maxMs) {
        throw new AppError('lease.ttl_exceeds_policy', `the lease may live until ${new Date(maxMs).toISOString()} (policy maxTtlSeconds ${l.policySnapshot.resources.maxTtlSeconds} from its creation); ttlSeconds ${ttlSeconds} goes past that`, {
          details: { field: 'ttlSeconds', max: l.policySnapshot.resources.maxTtlSeconds, maxExpiresAt: new Date(maxMs).toISOString(), remainingSeconds: Math.max(0, Math.floor((maxMs - nowMs) / 1000)) },
        });
      }
      const expiresAt = new Date(expiresAtMs).toISOString();
      return { record: { ...l, expiresAt }, reason: 'renewed', details: { ttlSeconds, expiresAt } };
    });
    if (!renewed.applied) {
      await this.active(id, by);
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
    const begun = await this.beginEnd(id, 'released', actorOf(by), graceMs);
    if (begun.applied) return this.finishEnd(begun.lease);
    const lease = begun.lease;
    if (TERMINAL_LEASE_STATUSES.has(lease.status)) return toView(lease);
    if (lease.status === 'releasing') return this.awaitEnded(lease);
    // Its creation owns it until it is ready or has failed (and cleaned up after itself).
    throw new AppError('lease.not_ready', `sandbox ${id} is still being created; release it once it is ready`, { details: { status: lease.status } });
  }

  /**
   * Handles the lease's expiry timer when it falls due: expires a ready lease whose `expiresAt`
   * has passed (exactly once across processes: the `ready` → `releasing` compare-and-swap
   * decides), or says when to fire again (renewed, or not ready yet).
   */
  async onExpiryTimer(id: string): Promise<ExpiryOutcome> {
    const lease = await this.deps.ledger.getLease(id);
    if (!lease || lease.status === 'releasing' || TERMINAL_LEASE_STATUSES.has(lease.status)) return { done: true };
    const nowMs = this.deps.now().getTime();
    const dueMs = Date.parse(lease.expiresAt);
    if (lease.status !== 'ready') return { retryAtMs: Math.max(dueMs, nowMs + 1000) };
    if (dueMs > nowMs) return { retryAtMs: dueMs };
    const begun = await this.beginEnd(id, 'expired', 'system', 0);
    if (begun.applied) await this.finishEnd(begun.lease);
    return { done: true };
  }

  /**
   * Starts ending a ready lease for `reason`: the `ready` → `releasing` compare-and-swap that
   * exactly one caller wins (an expiry only while the lease is past its `expiresAt`, so a
   * renewal that came first wins). Returns whether this caller won, and the lease as it is.
   */
  private async beginEnd(id: string, reason: EndReason, actor: AuditActor, graceMs: number): Promise<{ applied: boolean; lease: LeaseRecord }> {
    const { now, channels } = this.deps;
    const begun = await this.transition(id, (l) => {
      if (l.status !== 'ready') return null;
      if (reason === 'expired' && Date.parse(l.expiresAt) > now().getTime()) return null;
      const releaseGraceUntil = new Date(now().getTime() + graceMs).toISOString();
      return {
        record: { ...l, status: 'releasing', endReason: reason, endedBy: actor, inProgressBy: channels.processId, releaseGraceUntil },
        reason,
        details: graceMs > 0 ? { graceMs } : {},
      };
    });
    if (!begun.lease) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return { applied: begun.applied, lease: begun.lease };
  }

  /**
   * Finishes a release this process holds (`inProgressBy`): settles the calls (grace, then the
   * cancel chain) where an agent is there to do it, tears everything down, and only then
   * records the final status, its lease event and its audit entry. When a teardown step fails,
   * the lease stays `releasing`, handed back (`inProgressBy` null) for reconcile to finish.
   */
  private async finishEnd(lease: LeaseRecord): Promise<Lease> {
    const { now, log, channels } = this.deps;
    const ending = ENDINGS[lease.endReason as EndReason] ?? ENDINGS.released;
    if (ending.settleCalls) await this.settleCalls(lease);
    const failures = await this.teardown(lease.id, lease.manifest?.digest ?? null);
    const mine = (l: LeaseRecord): boolean => l.status === 'releasing' && l.inProgressBy === channels.processId;
    if (failures.length > 0) {
      log.warn({ leaseId: lease.id, failures: failures.map(String) }, 'sandbox teardown incomplete; reconcile will finish it');
      const handedBack = await this.transition(lease.id, (l) =>
        mine(l) ? { record: { ...l, inProgressBy: null }, reason: 'teardown_incomplete', details: { failures: failures.map(String).slice(0, 5) } } : null,
      );
      return toView(handedBack.lease ?? lease);
    }
    const ended = await this.transition(lease.id, (l) =>
      mine(l) ? { record: { ...l, status: ending.status, endedAt: now().toISOString(), inProgressBy: null, releaseGraceUntil: null }, reason: l.endReason ?? 'released' } : null,
    );
    if (!ended.lease) throw new AppError('lease.not_found', `no sandbox ${lease.id}`, { details: { id: lease.id } });
    if (ended.applied) {
      await this.closeRecords(lease.id);
      await this.deps.quotas.release(lease.id);
      await this.deps.audit.record({
        actor: ended.lease.endedBy ?? 'system',
        action: ending.action,
        target: `lease:${lease.id}`,
        beforeDigest: lease.manifest?.digest ?? null,
        afterDigest: null,
        details: { tenant: lease.tenant, reason: lease.endReason },
      });
      log.info({ leaseId: lease.id, status: ending.status, reason: lease.endReason }, 'sandbox ended');
    }
    return toView(ended.lease);
  }

  /** Starts the retention clock of an ended lease's records and drops its expiry timer. */
  private async closeRecords(id: string): Promise<void> {
    await this.deps.ledger.retain(id, this.options.retentionSeconds);
    await this.deps.expiry.clear(id);
  }

  /**
   * Lets the lease's open calls finish until its `releaseGraceUntil`, then cancels the rest
   * through the normal chain (queued ones end `cancelled` with nothing run; the agent kills the
   * process group of running ones and reports) and waits up to `cancelWaitMs` for the agent's
   * reports. This process consumes the lease's returns meanwhile, unless a live one does.
   */
  private async settleCalls(lease: LeaseRecord): Promise<void> {
    const { ledger, calls, log, now } = this.deps;
    await this.consumeReturns(lease.id, lease.policySnapshot);
    await this.waitCallsFinished(lease.id, Date.parse(lease.releaseGraceUntil ?? now().toISOString()));
    const open = await ledger.openCalls(lease.id);
    if (open.length === 0) return;
    for (const callId of open) {
      await calls.cancel(lease, callId).catch((err: unknown) => log.warn({ leaseId: lease.id, callId, err }, 'cancel at release failed'));
    }
    await this.waitCallsFinished(lease.id, now().getTime() + (this.options.cancelWaitMs ?? 10_000));
  }

  private async waitCallsFinished(leaseId: string, untilMs: number): Promise<void> {
    while ((await this.deps.ledger.openCalls(leaseId)).length > 0 && this.deps.now().getTime() < untilMs) {
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Waits for a release another request or process is doing, and returns the final record; a
   * release whose process died is taken over. Gives up (returning the lease as it is,
   * `releasing`) after its grace plus a minute.
   */
  private async awaitEnded(lease: LeaseRecord): Promise<Lease> {
    const deadline = Date.parse(lease.releaseGraceUntil ?? this.deps.now().toISOString()) + 60_000;
    for (;;) {
      const current = await this.record(lease.id);
      if (current.status !== 'releasing' || this.deps.now().getTime() > deadline) return toView(current);
      if (!(await this.isAlive(current.inProgressBy))) {
        const resumed = await this.resumeRelease(current);
        if (resumed) return resumed;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * Takes over a release whose process is gone (compare-and-swap of `inProgressBy`, so one
   * process does) and finishes it. Returns null when another process took it first.
   */
  private async resumeRelease(lease: LeaseRecord): Promise<Lease | null> {
    const taken = await this.transition(lease.id, (l) =>
      l.status === 'releasing' && l.inProgressBy === lease.inProgressBy ? { record: { ...l, inProgressBy: this.deps.channels.processId }, reason: 'release_resumed', details: { from: lease.inProgressBy } } : null,
    );
    return taken.applied ? this.finishEnd(taken.lease!) : null;
  }

  /**
   * Makes the runtime and the ledger agree; runs at start and then periodically, in every
   * control-plane process at once (each change is a compare-and-swap, so they do not repeat
   * each other's work). What it finds, by lease, among what carries this owner and installation
   * id (another installation's sandboxes, and those made before installation ids, are never
   * listed, so never reaped):
   * - container, volumes or network but no lease record, or an ended lease → removed (`lease.reap`);
   * - `pending`/`starting` whose process is gone → `failed` (`create_interrupted`), leftovers removed;
   * - `ready` with a running container → adopted: its returns consumed (and its egress served)
   *   when no live process does, its expiry timer ensured (one past due fires at once);
   * - `ready` whose container is gone or stopped → `lost`, open calls `effect_unknown`;
   * - `releasing` whose process is gone → the release finished here.
   * Also stops consuming returns of leases others ended, and deletes agent ACL users of ended leases.
   */
  async reconcile(): Promise<ReconcileOutcome> {
    const { runtime, ledger, channels } = this.deps;
    const result: ReconcileOutcome = { adopted: [], removed: [], lost: [], failed: [], resumed: [] };
    const owned = await runtime.listOwned(this.options.ownership);
    for (const sandbox of owned) {
      const lease = await ledger.getLease(sandbox.leaseId);
      // A warm pool's sandbox has no lease until one claims it; the pool looks after it.
      if (!lease && (await this.deps.pools?.owns(sandbox.leaseId))) continue;
      if (lease && !TERMINAL_LEASE_STATUSES.has(lease.status)) {
        await this.reconcileLease(lease, sandbox, result);
      } else {
        await this.reap(sandbox.leaseId, lease, lease ? 'lease_ended' : 'no_lease');
        result.removed.push(sandbox.leaseId);
      }
    }
    const listed = new Set(owned.map((s) => s.leaseId));
    const unlisted = (await ledger.listLeases()).filter((l) => l.owner === this.options.ownership.owner && !listed.has(l.id) && !TERMINAL_LEASE_STATUSES.has(l.status));
    if (unlisted.length > 0) {
      // Listed again after the ledger was read: a lease that became ready after the first
      // listing has its container in this one, and is not taken for lost.
      const present = new Set((await runtime.listOwned(this.options.ownership)).map((s) => s.leaseId));
      for (const lease of unlisted) if (!present.has(lease.id)) await this.reconcileLease(lease, null, result);
    }
    // Returns this process consumes of leases another process ended go too.
    for (const leaseId of channels.activeLeases()) {
      const lease = await ledger.getLease(leaseId);
      if (!lease && (await this.deps.pools?.owns(leaseId))) continue;
      if (!lease || TERMINAL_LEASE_STATUSES.has(lease.status)) {
        await channels.stop(leaseId);
        await this.deps.egress.stop(leaseId);
      }
    }
    for (const leaseId of await channels.agentUserLeases()) {
      const lease = await ledger.getLease(leaseId);
      if (!lease && (await this.deps.pools?.owns(leaseId))) continue;
      if (!lease || TERMINAL_LEASE_STATUSES.has(lease.status)) await channels.destroy(leaseId);
    }
    return result;
  }

  private async reconcileLease(lease: LeaseRecord, sandbox: OwnedSandbox | null, result: ReconcileOutcome): Promise<void> {
    switch (lease.status) {
      case 'pending':
      case 'starting':
        if (await this.isAlive(lease.inProgressBy)) return;
        if (await this.failInterrupted(lease)) result.failed.push(lease.id);
        return;
      case 'releasing':
        if (await this.isAlive(lease.inProgressBy)) return;
        if (await this.resumeRelease(lease)) result.resumed.push(lease.id);
        return;
      case 'ready':
        if (sandbox?.running) {
          await this.consumeReturns(lease.id, lease.policySnapshot);
          await this.deps.expiry.ensure(lease.id, Date.parse(lease.expiresAt));
          result.adopted.push(lease.id);
          return;
        }
        {
          const begun = await this.beginEnd(lease.id, sandbox?.containerId ? 'container_exited' : 'container_missing', 'system', 0);
          if (!begun.applied) return;
          await this.finishEnd(begun.lease);
          result.lost.push(lease.id);
        }
        return;
      default:
        return;
    }
  }

  /**
   * Fails a create whose process died: `failed` first (one process wins), then its leftovers
   * go; a crash in between leaves an ended lease with leftovers, which the next reconcile
   * reaps. True when this call failed it.
   */
  private async failInterrupted(lease: LeaseRecord): Promise<boolean> {
    const failed = await this.transition(lease.id, (l) =>
      (l.status === 'pending' || l.status === 'starting') && l.inProgressBy === lease.inProgressBy
        ? { record: { ...l, status: 'failed', endedAt: this.deps.now().toISOString(), endReason: 'create_interrupted', inProgressBy: null }, reason: 'create_interrupted', details: { from: lease.inProgressBy } }
        : null,
    );
    if (!failed.applied) return false;
    await this.reap(lease.id, failed.lease, 'create_interrupted');
    await this.closeRecords(lease.id);
    await this.deps.quotas.release(lease.id);
    return true;
  }

  /**
   * Removes what a lease left in the runtime and Redis (container, volumes, network, queues,
   * credentials) and records it once in the audit log as `lease.reap` by `system`.
   */
  private async reap(leaseId: string, lease: LeaseRecord | null, reason: 'no_lease' | 'lease_ended' | 'create_interrupted'): Promise<void> {
    const failures = await this.teardown(leaseId, lease?.manifest?.digest ?? null);
    if (failures.length > 0) {
      this.deps.log.warn({ leaseId, failures: failures.map(String) }, 'reaping a sandbox was incomplete; the next reconcile tries again');
      return;
    }
    if (!(await this.deps.ledger.claimOnce(`reap:${leaseId}`, 300))) return;
    await this.deps.audit.record({
      actor: 'system',
      action: 'lease.reap',
      target: `lease:${leaseId}`,
      beforeDigest: lease?.manifest?.digest ?? null,
      afterDigest: null,
      details: { reason, status: lease?.status ?? null },
    });
    this.deps.log.info({ leaseId, reason }, 'removed what a sandbox left behind');
  }

  /** Whether the control-plane process `processId` is alive (null: no process). */
  private async isAlive(processId: string | null): Promise<boolean> {
    return processId !== null && (await this.deps.channels.isAlive(processId));
  }

  /**
   * Consumes the lease's returns in this process unless a live one does (the consumer lock);
   * the process that consumes them also serves the lease's egress proxy.
   */
  private async consumeReturns(id: string, policy: Policy): Promise<void> {
    if (await this.deps.channels.startReturns(id, (leaseId, message) => this.deps.calls.ingest(leaseId, message))) await this.serveEgress(id, policy);
  }

  private transition(id: string, decide: (lease: LeaseRecord) => LeaseTransition | null): ReturnType<Ledger['transitionLease']> {
    return this.deps.ledger.transitionLease(id, decide, this.deps.now);
  }

  /** Host directory holding the lease's agent credentials file until the agent read it. */
  private credentialsDir(id: string): string {
    return join(this.options.dataDir, 'leases', id);
  }

  /** Host directory of the lease's egress proxy socket. */
  private egressDir(id: string): string {
    return join(this.options.dataDir, 'egress', id);
  }

  private async serveEgress(id: string, policy: Policy): Promise<void> {
    if (policy.network.mode !== 'allowlist') return;
    await this.deps.egress.serve(id, policy.network.allow, join(this.egressDir(id), EGRESS_SOCKET_NAME));
  }

  /** The lease record if `by` may see it; another tenant's is `lease.not_found`, exactly like a missing one. */
  private async visible(id: string, by: Principal): Promise<LeaseRecord> {
    const lease = await this.record(id);
    if (!seesTenant(by, lease.tenant)) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return lease;
  }

  private async record(id: string): Promise<LeaseRecord> {
    const lease = await this.deps.ledger.getLease(id);
    if (!lease) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return lease;
  }

  /** Waits for a lease another request is creating (idempotent replay), up to 60 s. */
  private async awaitCreated(id: string): Promise<Lease> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const lease = await this.deps.ledger.getLease(id);
      if (lease && lease.status !== 'pending' && lease.status !== 'starting') {
        if (lease.status === 'failed') throw new AppError('lease.create_failed', `sandbox ${id} for this Idempotency-Key failed to start`, { details: { leaseId: id } });
        return toView(lease);
      }
      if (Date.now() > deadline) throw new AppError('lease.not_ready', `sandbox ${id} is still being created`, { details: { leaseId: id } });
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Removes everything the lease holds, in order: the container (so the agent stops), the
   * returns still in flight (so results the agent sent are ledgered), open calls (finished as
   * `cancelled` if no attempt started, else `effect_unknown`), the queues and ACL user, the
   * credentials. Every step runs; failures are returned.
   */
  private async teardown(id: string, manifestDigest: string | null): Promise<unknown[]> {
    const { runtime, channels, calls } = this.deps;
    const failures: unknown[] = [];
    const step = async (fn: () => Promise<unknown>): Promise<void> => {
      try {
        await fn();
      } catch (err) {
        failures.push(err);
      }
    };
    await step(() => runtime.remove(id, this.options.ownership));
    await step(() => channels.drainReturns(id, 5000));
    await step(() => calls.abandonOpenCalls(id, manifestDigest, (callId) => channels.attemptOf(id, callId)));
    await step(() => channels.destroy(id));
    await step(() => this.deps.egress.stop(id));
    await step(() => rm(this.egressDir(id), { recursive: true, force: true }));
    await step(() => rm(join(this.options.dataDir, 'leases', id), { recursive: true, force: true }));
    return failures;
  }
}

/**
 * Resolves symlinks in the mount allowlist and in the policy's read-only mount host paths, for
 * the compiler to check one against the other (a path that does not exist resolves to null).
 */
async function resolveMounts(policy: Policy, allowlist: readonly string[], protectedHostPaths: readonly string[]): Promise<CompileInput['mounts']> {
  const real = async (path: string): Promise<string | null> => realpath(path).catch(() => null);
  if (policy.filesystem.readOnlyMounts.length === 0) return { allowlist: [], realpaths: new Map(), protectedPaths: [] };
  const existing = async (paths: readonly string[]): Promise<string[]> => (await Promise.all(paths.map(real))).filter((d): d is string => d !== null);
  const realpaths = new Map(await Promise.all(policy.filesystem.readOnlyMounts.map(async (m) => [m.hostPath, await real(m.hostPath)] as const)));
  return { allowlist: await existing(allowlist), realpaths, protectedPaths: await existing(protectedHostPaths) };
}

/** How a requested secret is delivered: `env` defaults to the name when neither env nor file is given (the schema checked it is a variable name). */
function grantOf(r: SecretRequest): SecretGrant {
  return { name: r.name, env: r.env ?? (r.file === undefined ? r.name : null), file: r.file ?? null };
}

/** How long a claimed pooled sandbox may take to acknowledge its binding, ms. */
const BIND_TIMEOUT_MS = 5000;

/** A lease's decisions before anything is made (see `LeaseService.plan`). */
interface LeasePlan {
  policy: Policy;
  ref: PolicyRef;
  ttlSeconds: number;
  env: Record<string, string>;
  grants: SecretGrant[];
  /** Secret values in clear, zeroed when the create ends. */
  values: Map<string, Buffer>;
  image: string;
  imageId: string;
  engineVersion: string;
  spec: SandboxSpec;
}

/** A started sandbox whose agent said hello. */
export interface Launched {
  containerId: string;
  facts: SandboxFacts;
}

/** A pooled sandbox a lease claimed: its id (the lease's from now on), container and facts. */
export interface WarmSandbox extends Launched {
  id: string;
}

/** The API view of a lease record (internal fields dropped). */
export function toView(r: LeaseRecord): Lease {
  return {
    id: r.id,
    status: r.status,
    createdAt: r.createdAt,
    expiresAt: r.expiresAt,
    endedAt: r.endedAt,
    endReason: r.endReason,
    image: r.image,
    policy: r.policy,
    manifest: r.manifest,
    labels: r.labels,
    tenant: r.tenant,
  };
}
