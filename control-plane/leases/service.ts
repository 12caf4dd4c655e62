/**
 * Lease lifecycle: create (policy → spec → container → agent hello → manifest), read, release,
 * expire, and reconcile with the runtime after a restart. The runtime's labels and the ledger
 * are the sources of truth; no in-process map is, so a restart loses nothing.
 *
 * Teardown is idempotent and runs every step even when one fails.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, realpath, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import type { Lease, PolicyRef, SandboxFacts } from '../../contract/objects.js';
import type { AgentConfig, SecretGrant } from '../../contract/queue.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { AuditActor } from '../audit/schema.js';
import { deliveryAad, seal, type SecretDelivery } from '../../contract/secrets.js';
import type { CallService } from '../calls/service.js';
import { seesTenant, type Principal } from '../http/auth.js';
import type { Ledger, LeaseRecord } from '../ledger/ledger.js';
import { buildManifest } from '../manifest/manifest.js';
import type { EgressProxy } from '../egress/proxy.js';
import { allowlistDigest } from '../egress/rules.js';
import { agentEgress, compileSandboxSpec, type CompileInput, AGENT_REDIS_DIR, AGENT_SPOOL_DIR, EGRESS_SOCKET_NAME } from '../policies/compiler.js';
import type { Policy } from '../policies/schema.js';
import type { PolicyService } from '../policies/service.js';
import type { LeaseMetrics } from '../metrics/service.js';
import type { LeaseChannels } from '../queue/lease-channels.js';
import type { QuotaService } from '../quotas/service.js';
import type { SandboxRuntime, SandboxSpec } from '../runtime/runtime.js';
import type { SecretService } from '../secrets/service.js';
import type { CreateSandboxBody, SecretRequest } from './schema.js';

export interface LeaseServiceOptions {
  owner: string;
  sbxVersion: string;
  dataDir: string;
  defaultImage: string;
  /** Host path of the Redis unix socket agents connect to. */
  agentRedisSocket: string;
  redisPrefix: string;
  /** How long a new sandbox's agent has to report ready, ms. Default 30 000. */
  helloTimeoutMs?: number;
  /** A lease still `creating` after this long is treated as failed by reconcile, ms. Default 120 000. */
  staleCreatingMs?: number;
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
  policies: Pick<PolicyService, 'resolve'>;
  audit: Pick<AuditLog, 'record'>;
  calls: CallService;
  /** Serves the egress proxy of leases whose policy network mode is `allowlist`. */
  egress: EgressProxy;
  /** Warm pools a lease may claim a started sandbox from (none: every lease starts cold). */
  pools?: { claim(ref: PolicyRef, image: string): Promise<WarmSandbox | undefined>; owns(id: string): Promise<boolean> };
  /** Values of the secrets a lease is granted, for its agent only. */
  secrets: Pick<SecretService, 'reveal'>;
  /** The tenant's share a lease holds from before it is created until it has ended. */
  quotas: Pick<QuotaService, 'reserve' | 'release'>;
  metrics: LeaseMetrics;
  now: () => Date;
  log: Logger;
}

/** Statuses of a lease that has ended. */
export const TERMINAL: ReadonlySet<string> = new Set(['released', 'expired', 'failed']);

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
   * `policy.mount_not_allowed`, `quota.exceeded`, `runtime.image_not_found`,
   * `runtime.unavailable`, `lease.create_failed`. Every check comes before anything is created.
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
      owner: this.options.owner,
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
   * container started now. The record is `creating` until the agent is ready; on failure
   * everything is torn down and the record ends `failed`.
   */
  private async make(id: string, plan: LeasePlan, body: CreateSandboxBody, by: Principal, warm: WarmSandbox | undefined): Promise<Lease> {
    const { ledger, now, log } = this.deps;
    const createdAt = now();
    const record: LeaseRecord = {
      id,
      status: 'creating',
      createdAt: createdAt.toISOString(),
      expiresAt: new Date(createdAt.getTime() + plan.ttlSeconds * 1000).toISOString(),
      endedAt: null,
      endReason: null,
      image: plan.image,
      policy: plan.ref,
      manifest: null,
      labels: body.labels ?? {},
      tenant: by.tenant,
      owner: this.options.owner,
      env: plan.env,
      policySnapshot: plan.policy,
      secrets: plan.grants,
      containerId: warm?.containerId ?? null,
    };
    // Quota is taken before anything exists, and given back by the failure path or end().
    await this.deps.quotas.reserve(id, by.tenant, { cpus: plan.policy.resources.cpus, memoryBytes: plan.policy.resources.memoryBytes });
    await ledger.putLease(record);
    try {
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
      const ready: LeaseRecord = { ...record, status: 'ready', manifest, containerId: launched.containerId };
      await ledger.putLease(ready);
      await ledger.scheduleExpiry(id, Date.parse(ready.expiresAt));
      await this.deps.audit.record({
        actor: actorOf(by),
        action: 'lease.create',
        target: `lease:${id}`,
        beforeDigest: null,
        afterDigest: manifest.digest,
        details: { tenant: by.tenant, policy: plan.ref, warm: warm !== undefined },
      });
      this.deps.metrics.leaseCreated(warm ? 'warm' : 'cold', (now().getTime() - createdAt.getTime()) / 1000);
      log.info({ sandboxId: id, policy: plan.ref, warm: warm !== undefined, ms: now().getTime() - createdAt.getTime() }, 'sandbox leased');
      return toView(ready);
    } catch (err) {
      const failures = await this.teardown(id, null);
      await ledger.putLease({ ...record, status: 'failed', endedAt: now().toISOString(), endReason: 'create_failed' });
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
    await channels.startReturns(id, (leaseId, message) => this.deps.calls.ingest(leaseId, message));
    await this.serveEgress(id, plan.policy);
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
   * Starts a sandbox for a warm pool: leased to nobody yet, under `policy` (name and version)
   * and `image`, with a lease id it keeps when claimed. The pool records it; on failure
   * everything made is torn down and the error thrown.
   */
  async launchWarm(id: string, policy: { name: string; version?: number }, image: string): Promise<Launched & { ref: PolicyRef; image: string }> {
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
   * `bound`). Throws `lease.create_failed` when the agent does not take it in time.
   */
  private async bindWarm(id: string, plan: LeasePlan): Promise<void> {
    // The process that filled the pool may be gone: whoever consumes the returns serves egress.
    if (await this.deps.channels.startReturns(id, (leaseId, message) => this.deps.calls.ingest(leaseId, message))) await this.serveEgress(id, plan.policy);
    const deliveryKey = plan.grants.length > 0 ? await this.deliverSecrets(id, plan.grants, plan.values) : null;
    // A ready agent takes its binding in milliseconds; one that does not within BIND_TIMEOUT_MS
    // is not waited for longer (the lease starts cold instead).
    const ack = await this.deps.channels.bind(id, { env: plan.env, secrets: { grants: plan.grants, deliveryKey } }, BIND_TIMEOUT_MS);
    if (!ack.ok) throw new AppError('lease.create_failed', `the pooled sandbox did not take its lease: ${ack.error}`, { details: { sandboxId: id } });
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
   * for another tenant's lease), `lease.expired`, `lease.released` (also for failed leases),
   * `lease.not_ready`.
   */
  async active(id: string, by: Principal): Promise<LeaseRecord> {
    let lease = await this.visible(id, by);
    if (lease.status === 'ready' && Date.parse(lease.expiresAt) <= this.deps.now().getTime()) {
      await this.expire(id);
      lease = await this.record(id);
    }
    switch (lease.status) {
      case 'ready':
        return lease;
      case 'expired':
        throw new AppError('lease.expired', `sandbox ${id} expired at ${lease.expiresAt}`, { details: { expiresAt: lease.expiresAt } });
      case 'released':
      case 'failed':
        throw new AppError('lease.released', `sandbox ${id} was released (${lease.endReason ?? lease.status})`, { details: { endReason: lease.endReason } });
      default:
        throw new AppError('lease.not_ready', `sandbox ${id} is ${lease.status}`, { details: { status: lease.status } });
    }
  }

  /**
   * Releases the sandbox for `by`: container, volumes, queues and credentials go; calls and
   * receipts stay. Idempotent. Throws `lease.not_found` (also for another tenant's lease), and
   * `lease.not_ready` while it is being created.
   */
  async release(id: string, by: Principal): Promise<Lease> {
    await this.visible(id, by);
    return this.end(id, 'released', actorOf(by));
  }

  /** Ends the lease for `reason` (idempotent) and records it in the audit log as done by `actor`. */
  private async end(id: string, reason: 'released' | 'expired' | 'container_missing', actor: AuditActor): Promise<Lease> {
    const lease = await this.record(id);
    if (TERMINAL.has(lease.status)) return toView(lease);
    if (lease.status === 'creating' && reason === 'released') {
      // Its creation owns it until it is ready or has failed (and cleaned up after itself).
      throw new AppError('lease.not_ready', `sandbox ${id} is still being created; release it once it is ready`, { details: { status: lease.status } });
    }
    await this.deps.ledger.putLease({ ...lease, status: 'releasing' });
    const failures = await this.teardown(id, lease.manifest?.digest ?? null);
    const ended: LeaseRecord = {
      ...lease,
      status: reason === 'expired' ? 'expired' : 'released',
      endedAt: this.deps.now().toISOString(),
      endReason: reason,
    };
    await this.deps.ledger.putLease(ended);
    await this.deps.quotas.release(id);
    await this.deps.ledger.claimExpiry(id);
    await this.deps.ledger.retain(id, this.options.retentionSeconds);
    await this.deps.audit.record({
      actor,
      action: reason === 'expired' ? 'lease.expire' : 'lease.release',
      target: `lease:${id}`,
      beforeDigest: lease.manifest?.digest ?? null,
      afterDigest: null,
      details: { tenant: lease.tenant, reason },
    });
    if (failures.length > 0) this.deps.log.warn({ leaseId: id, failures: failures.map(String) }, 'sandbox teardown incomplete');
    this.deps.log.info({ leaseId: id, reason }, 'sandbox released');
    return toView(ended);
  }

  /** Expires the lease unless another process already did. */
  async expire(id: string): Promise<void> {
    if (await this.deps.ledger.claimExpiry(id)) await this.end(id, 'expired', 'system');
  }

  /** Releases every lease past its `expiresAt`. Returns how many this call expired. */
  async expireDue(): Promise<number> {
    const due = await this.deps.ledger.dueExpiries(this.deps.now().getTime());
    let n = 0;
    for (const id of due) {
      if (await this.deps.ledger.claimExpiry(id)) {
        await this.end(id, 'expired', 'system').catch((err: unknown) => this.deps.log.warn({ leaseId: id, err }, 'expiry failed'));
        n += 1;
      }
    }
    return n;
  }

  /**
   * Makes the runtime and the ledger agree after a start or restart: containers this owner
   * labelled without a live lease are removed; live leases without a running container are
   * released (`container_missing`); live leases with one are adopted (their returns consumed).
   * `finishReleasing` (at start-up) also completes releases a dead process left `releasing`;
   * periodic runs leave those to the release in progress.
   */
  async reconcile({ finishReleasing = true } = {}): Promise<{ adopted: string[]; removed: string[]; lost: string[] }> {
    const gone = (status: string): boolean => status === 'ready' || (finishReleasing && status === 'releasing');
    const { runtime, ledger, channels, now } = this.deps;
    const owned = await runtime.listOwned(this.options.owner);
    const result = { adopted: [] as string[], removed: [] as string[], lost: [] as string[] };
    const staleMs = this.options.staleCreatingMs ?? 120_000;
    for (const c of owned) {
      const lease = await ledger.getLease(c.leaseId);
      const staleCreating = lease?.status === 'creating' && now().getTime() - Date.parse(lease.createdAt) > staleMs;
      // A warm pool's sandbox has no lease until one claims it; the pool looks after it.
      if (!lease && (await this.deps.pools?.owns(c.leaseId))) continue;
      if (!lease || TERMINAL.has(lease.status) || staleCreating) {
        await this.teardown(c.leaseId, lease?.manifest?.digest ?? null);
        if (lease && staleCreating) await ledger.putLease({ ...lease, status: 'failed', endedAt: now().toISOString(), endReason: 'create_failed' });
        result.removed.push(c.leaseId);
      } else if (lease.status === 'ready' && c.running) {
        // The process consuming a lease's returns also serves its egress proxy.
        if (await channels.startReturns(lease.id, (leaseId, message) => this.deps.calls.ingest(leaseId, message))) {
          await this.serveEgress(lease.id, lease.policySnapshot);
        }
        await ledger.scheduleExpiry(lease.id, Date.parse(lease.expiresAt));
        result.adopted.push(lease.id);
      } else if (gone(lease.status)) {
        await this.end(lease.id, 'container_missing', 'system');
        result.lost.push(lease.id);
      }
    }
    // Returns this process consumes of leases another process ended go too.
    for (const leaseId of channels.activeLeases()) {
      const lease = await ledger.getLease(leaseId);
      if (!lease || TERMINAL.has(lease.status)) {
        await channels.stop(leaseId);
        await this.deps.egress.stop(leaseId);
      }
    }
    const withContainer = new Set(owned.map((c) => c.leaseId));
    for (const lease of await ledger.listLeases()) {
      if (lease.owner !== this.options.owner || withContainer.has(lease.id)) continue;
      if (gone(lease.status)) {
        await this.end(lease.id, 'container_missing', 'system');
        result.lost.push(lease.id);
      }
    }
    return result;
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
      if (lease && lease.status !== 'creating') {
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
    await step(() => runtime.remove(id, this.options.owner));
    await step(() => channels.drainReturns(id, 2000));
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

/** A pooled sandbox a lease claimed: its id (the lease's from now on), container and facts. */
export interface WarmSandbox extends Launched {
  id: string;
}

/** A started sandbox whose agent said hello. */
export interface Launched {
  containerId: string;
  facts: SandboxFacts;
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
