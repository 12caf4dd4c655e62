/**
 * Wires a whole control plane from its config: Redis, the runtime driver, the domains' stores, the
 * agent link, the services, the HTTP app and background work. The one place that knows every part:
 * the return path (agent link → calls) is joined here. main.ts and the tests run this same assembly.
 */
import { existsSync } from 'node:fs';
import { SnapshotService } from './snapshots/service.js';
import { ProcessService } from './processes/service.js';
import { SnapshotStore } from './snapshots/store.js';
import { dirname, join } from 'node:path';
import { AGENT_RUNTIME_DIR, AGENT_RUNTIME_NODE } from '../contract/agent-runtime.js';
import type { FastifyInstance } from 'fastify';
import { TERMINAL_LEASE_STATUSES } from '../contract/objects.js';
import type { Logger } from 'pino';
import { SBX_VERSION } from '../contract/version.js';
import { ApiKeyService } from './api-keys/service.js';
import { RedisApiKeyStore } from './api-keys/store.js';
import { AgentLink } from './agent-link/link.js';
import { ArtifactFetcher } from './artifacts/fetch.js';
import { ArtifactRecords, ArtifactStore } from './artifacts/store.js';
import { AuditLog } from './audit/service.js';
import { RedisAuditStore } from './audit/store.js';
import { ApprovalService } from './calls/approval-service.js';
import { CallService } from './calls/service.js';
import { SessionService } from './sessions/service.js';
import { SessionStore } from './sessions/store.js';
import { TerminalService } from './terminals/service.js';
import { TerminalSlots } from './terminals/store.js';
import { CallStore } from './calls/store.js';
import type { Config } from './config.js';
import { buildApp } from './app.js';
import { BackgroundTasks } from './background.js';
import { EgressAttribution } from './egress/attribution.js';
import { CredentialInjection } from './egress/credentials.js';
import { EgressProxy } from './egress/proxy.js';
import { createResolver } from './egress/resolver.js';
import { EgressLog } from './egress/store.js';
import { ImageService } from './images/service.js';
import { ImageStore } from './images/store.js';
import { registryImages } from './images/registry-images.js';
import { LEASE_EXPIRY_QUEUE } from './leases/expiry.js';
import { LeaseService, type ReconcileOutcome } from './leases/service.js';
import { LeaseStore } from './leases/store.js';
import { Metrics } from './metrics/service.js';
import { createTracing } from './telemetry/tracing.js';
import { E2bProcessStore } from './e2b/store.js';
import { PoolStore } from './pools/store.js';
import { WarmPools } from './pools/warm-pools.js';
import { readPolicyFiles } from './policies/files.js';
import { PolicyService } from './policies/service.js';
import { ProposalService } from './policies/proposal-service.js';
import { PreviewService } from './previews/service.js';
import { PreviewLog } from './previews/store.js';
import { AgentTunnels } from './agent-link/tunnels.js';
import { urlSigningKey } from './http/signed-urls.js';
import { leaseDirs } from './leases/plan.js';
import { RedisPolicyStore } from './policies/store.js';
import { QuotaService } from './quotas/service.js';
import { RedisQuotaStore } from './quotas/store.js';
import { installationId } from './installation/store.js';
import { connectRedis, redisOptions } from './redis/connections.js';
import { Notifier } from './redis/notifier.js';
import { DurableTimers } from './redis/timers.js';
import { createImageEngine, createRuntime } from './runtime/drivers.js';
import { agentLinkKey, startLinkListener } from './agent-link/link-listener.js';
import type { Ownership } from './runtime/runtime.js';
import { LoopVolumeDisks } from './runtime/volume-disks.js';
import { RedisChangeLog } from './watch/store.js';
import { SecretService } from './secrets/service.js';
import { RedisSecretRecords } from './secrets/store.js';
import { VolumeService } from './volumes/service.js';
import { RedisVolumeStore } from './volumes/store.js';
import { BootGate } from './leases/boot-gate.js';

export interface ControlPlane {
  app: FastifyInstance;
  leases: LeaseService;
  /** `SBX_OWNER` and the installation id (one per Redis and key prefix): the labels on all it creates, all it ever reaps. */
  ownership: Ownership;
  /** This control plane's metrics (its own registry); warm pools report to it. */
  metrics: Metrics;
  /**
   * Reconciles with the runtime, starts this process's expiry timer worker, then reconciles every `reconcileIntervalMs` (5000:
   * a dead sandbox is `lost`, its open calls finished, a dead process's work taken over); fills warm pools every `poolIntervalMs` (1000).
   */
  startBackground(options?: { reconcileIntervalMs?: number; poolIntervalMs?: number }): Promise<ReconcileOutcome>;
  /** Stops background work, closes the app and every connection. Sandboxes keep running. */
  close(): Promise<void>;
}

/**
 * Throws Error when `config.secretsKey` is unset (main.ts reads or makes the key file first; a
 * control plane never runs without a key to encrypt secrets with).
 */
export async function createControlPlane(config: Config, apiKey: string, log: Logger): Promise<ControlPlane> {
  if (!config.secretsKey) throw new Error('no secrets key: set SBX_SECRETS_KEY or let main.ts create <data dir>/secrets-key');
  // Every sandbox runs its agent from this directory: without it no lease could start.
  if (!existsSync(join(config.agentRuntimeDir, AGENT_RUNTIME_NODE.slice(AGENT_RUNTIME_DIR.length + 1))))
    throw new Error(
      `no agent runtime at ${config.agentRuntimeDir}: run \`npm run setup\` (images/runtime/build-runtime.sh) or set SBX_AGENT_RUNTIME`,
    );
  const options = redisOptions(config.redis);
  const redis = connectRedis(options);
  const subscriber = connectRedis(options);
  // ioredis reconnects by itself (commands wait meanwhile); say so in the log, not on bare stderr.
  for (const conn of [redis, subscriber])
    conn.on('error', (err: Error) => log.warn({ err: err.message }, 'redis connection error; reconnecting'));
  const ownership = { owner: config.owner, installation: await installationId(redis, config.redisPrefix) };
  const runtime = createRuntime(config, ownership, log);
  const leaseStore = await LeaseStore.tracked(redis, config.redisPrefix, log);
  const callStore = new CallStore(redis, config.redisPrefix);
  const artifactRecords = new ArtifactRecords(redis, config.redisPrefix);
  const egressLog = new EgressLog(redis, config.redisPrefix);
  const previewLog = new PreviewLog(redis, config.redisPrefix);
  const notifier = await Notifier.start(subscriber, callStore.notifyPattern);
  // The return path: what agents send back is the call service's to ledger (made below, before any lease consumes returns).
  const link = new AgentLink(redis, options, config.redisPrefix, log, (leaseId, message) => calls.ingest(leaseId, message));
  // Before any lease work: other processes tell by this key that this one's creates and releases are alive.
  await link.liveness.start(config.linkAdvertise ?? undefined);
  const expiry = new DurableTimers(redis, options, config.redisPrefix, LEASE_EXPIRY_QUEUE, log);
  const now = (): Date => new Date();
  const audit = new AuditLog(new RedisAuditStore(redis, config.redisPrefix), now);
  const apiKeys = new ApiKeyService({ store: new RedisApiKeyStore(redis, config.redisPrefix), audit, now });
  const policies = new PolicyService({ store: new RedisPolicyStore(redis, config.redisPrefix), audit, now });
  const seeded = await policies.seed(await readPolicyFiles(config.policyDir));
  if (seeded.length > 0) log.info({ policies: seeded }, 'policy files imported into the policy store');
  const artifacts = new ArtifactStore(config.artifactDir, artifactRecords);
  // The byte channel to agents: port previews, file transfers, artifacts.
  const tunnels = new AgentTunnels({
    processId: link.liveness.processId,
    dirOf: (leaseId) => leaseDirs(config.dataDir, leaseId).previews, // previews: the agent brings each connection to a socket there
    signal: (leaseId, message) => link.calls.signal(leaseId, message),
    log,
    dialTimeoutMs: config.previewDialTimeoutMs,
  });
  const artifactFetcher = new ArtifactFetcher({ store: artifacts, tunnels });
  const liveLeaseIds = async (): Promise<string[]> =>
    (await leaseStore.leaseStatuses()).filter((l) => l.status === 'ready').map((l) => l.id);
  const bootGate = new BootGate(config.bootConcurrency); // sandboxes booting at once
  const metrics = new Metrics({
    leaseStates: () => leaseStore.statusCounts(),
    queueDepth: async () => link.calls.depth(await liveLeaseIds()),
    sandboxNodes: async () => (await runtime.listOwned(ownership)).filter((s) => s.running).map((s) => s.node),
    sandboxBoots: () => bootGate,
  });
  const attribution = new EgressAttribution(config.secretsKey); // which call a request through the egress proxy belongs to
  const tracing = createTracing(config.tracing);
  const calls: CallService = new CallService({
    store: callStore,
    egress: { credential: (l, c) => attribution.credential(l, c), injectedInto: (l, c) => egressLog.injectedInto(l, c) },
    artifacts,
    fetchArtifact: (leaseId, meta) => artifactFetcher.fetch(leaseId, meta),
    agent: link.calls,
    notifier,
    metrics,
    tracing,
    now,
    log,
  });
  const approvals = new ApprovalService({ calls, store: callStore, audit, now });
  const egress = new EgressProxy({
    resolve: createResolver(config.egressDnsServers),
    record: (leaseId, event) => (metrics.egressDecided(event.decision), egressLog.append(leaseId, event)),
    attribute: (leaseId, header) => attribution.callOf(leaseId, header),
    countInjected: (leaseId, callId, host, counts) => egressLog.addInjected(leaseId, callId, host, counts),
    log,
    upstreamCaFile: config.egressUpstreamCaFile,
  });
  link.returns.onLockLost((leaseId) => void egress.stop(leaseId)); // the replica holding a lease's consumer lock serves its egress
  const linkKey = agentLinkKey(config.secretsKey);
  const links = await startLinkListener(config.linkListen, { key: linkKey, egress, tunnels, peers: link.peers, tls: config.linkTls, log });
  const quotas = new QuotaService({
    store: new RedisQuotaStore(redis, config.redisPrefix),
    audit,
    defaults: config.defaultTenantQuota,
    now,
  });
  const volumes = new VolumeService(
    {
      store: new RedisVolumeStore(redis, config.redisPrefix),
      // One directory per installation: two installations sharing a data dir never see each other's disks.
      disks: new LoopVolumeDisks(join(config.dataDir, 'volumes', ownership.installation)),
      audit,
      leaseState: async (id) => {
        const lease = await leaseStore.getLease(id);
        return lease === null ? 'absent' : TERMINAL_LEASE_STATUSES.has(lease.status) ? 'ended' : 'live';
      },
      limitBytes: (tenant) => quotas.volumeLimitBytes(tenant),
      now,
    },
    { maxSizeBytes: config.volumeMaxBytes ?? 64 * 1024 * 1024 * 1024 },
  );
  const imageStore = new ImageStore(redis, config.redisPrefix);
  const images = new ImageService({
    store: imageStore,
    engine: createImageEngine(config, { helperImage: config.image, agentRuntimeDir: config.agentRuntimeDir }),
    audit,
    ownership,
    registries: config.imageRegistries,
    buildPolicy: config.imageBuildPolicy,
    buildNetwork: { egress, socketDir: join(config.dataDir, 'egress') },
    egressLog,
    now,
    log,
  });
  const secrets = new SecretService({ records: new RedisSecretRecords(redis, config.redisPrefix), key: config.secretsKey, audit, now });
  // Pools start sandboxes through the lease service, which claims from them: the launcher reaches `leases` once both exist.
  const pools =
    config.warmPools.length === 0
      ? undefined
      : new WarmPools(
          {
            store: new PoolStore(redis, config.redisPrefix),
            ownership,
            defaultImage: config.image,
            launcher: {
              launchWarm: (id, policy, image) => leases.launchWarm(id, policy, image),
              discardWarm: (id) => leases.discardWarm(id),
            },
            runtime,
            latestPolicy: async (name) => (await policies.resolve(name)).ref,
            log,
            now: () => Date.now(),
            onSizes: (pool, sizes) => metrics.setPoolSizes(pool, sizes),
            startsPerRound: bootGate.poolSlots(8), // 8 a round when boots are unbounded
          },
          config.warmPools,
        );
  /** Counts a lease reconcile found lost the moment it decided so: its `lost` status is readable only later. */
  const onLost = (leaseId: string): void => metrics.reconciled({ adopted: [], removed: [], lost: [leaseId] });
  /** An ended lease's records expire together, each domain's from its own store. */
  const retain = async (leaseId: string, seconds: number): Promise<void> => {
    await Promise.all([
      leaseStore.retain(leaseId, seconds),
      callStore.retain(leaseId, seconds),
      artifactRecords.retain(leaseId, seconds),
      egressLog.retain(leaseId, seconds),
      previewLog.retain(leaseId, seconds),
    ]);
  };
  const leases: LeaseService = new LeaseService(
    {
      runtime,
      store: leaseStore,
      link,
      expiry,
      retain,
      policies,
      audit,
      calls,
      egress,
      secrets,
      credentials: new CredentialInjection({ secretsKey: config.secretsKey, secrets }),
      quotas,
      metrics,
      images: config.runtime.kind === 'docker' ? images : registryImages(config.imageRegistries, config.image), // a cluster: by registry reference
      ...(pools ? { pools } : {}),
      volumes,
      snapshots: { source: (id, by) => snapshots.source(id, by) }, // resolved late: the snapshot service is made after this one
      onLost,
      now,
      log,
    },
    {
      ownership,
      sbxVersion: SBX_VERSION,
      dataDir: config.dataDir,
      defaultImage: config.image,
      agentRuntimeDir: config.agentRuntimeDir,
      agentRedisSocket: config.agentRedisSocket,
      redisPrefix: config.redisPrefix,
      retentionSeconds: config.ledgerRetentionSeconds,
      bootGate,
      mountAllowlist: config.mountAllowlist,
      protectedHostPaths: [config.dataDir, config.dockerSocket, dirname(config.agentRedisSocket)],
      ...(config.agentRelayDir ? { agentRelay: { dir: config.agentRelayDir, key: linkKey } } : {}),
    },
  );
  const snapshots: SnapshotService = new SnapshotService({
    store: new SnapshotStore(redis, config.redisPrefix),
    runtime,
    leases: {
      visible: (id, by) => leases.visible(id, by),
      create: (body, by, key) => leases.create(body, by, key),
      forgetIdempotencyKey: (key, by) => leases.forgetIdempotencyKey(key, by),
      release: (id, by) => leases.release(id, by),
      using: async (imageRef) =>
        (await leaseStore.listLeases()).filter((l) => l.image === imageRef && !TERMINAL_LEASE_STATUSES.has(l.status)).map((l) => l.id),
    },
    openCalls: (leaseId) => callStore.openCalls(leaseId),
    quotas,
    audit,
    ownership,
    settings: config.snapshots,
    now,
    log,
  });
  const urlKey = urlSigningKey(config.previewKey, config.secretsKey);
  const slots = new TerminalSlots(redis, config.redisPrefix);
  const terminals = new TerminalService({ calls, input: link.input, slots, leases, urlKey, now });
  const previews = new PreviewService({
    tunnels,
    log: previewLog,
    leases: { visible: (id, by) => leases.visible(id, by), usable: (lease) => leases.usable(lease) },
    key: urlKey,
    domain: config.previewDomain,
    now,
    warn: (obj, msg) => log.warn(obj, msg),
  });
  const app = await buildApp({
    previews,
    log,
    apiKey,
    snapshots,
    processes: new ProcessService({ calls, audit }),
    lookupPrincipal: (sha256) => apiKeys.lookup(sha256),
    apiKeys,
    policies,
    proposals: new ProposalService({ policies, leases: leaseStore, egress: egressLog, audit }),
    audit,
    leases,
    calls,
    approvals,
    terminals,
    live: link.live,
    callStore,
    sessions: new SessionService({ store: new SessionStore(redis, config.redisPrefix), calls, now }),
    egressLog,
    notifier,
    runtime,
    artifacts,
    secrets,
    quotas,
    volumes,
    images,
    imageStore,
    maxImageContextBytes: config.imageBuildPolicy.maxContextBytes,
    metrics,
    pingRedis: () => redis.ping(),
    spoolDir: join(config.dataDir, 'spool'),
    maxUploadBytes: config.maxUploadBytes,
    requestTimeoutMs: config.requestTimeoutMs,
    transfers: tunnels,
    changeLog: new RedisChangeLog(redis, config.redisPrefix),
    consoleDir: config.consoleDir,
    version: SBX_VERSION,
    mcpIdleSeconds: config.mcpIdleSeconds,
    e2b: { processStore: new E2bProcessStore(redis, config.redisPrefix), tokenKey: urlKey, previewDomain: config.previewDomain },
    tracing,
  });
  const background = new BackgroundTasks(log);
  const every = background.every.bind(background);
  /** Reconciles leases and counts what it did. `adopted` counts the leases this process took over in this run (every run lists all running leases as adopted, also those it already served). */
  const reconcile = async (): Promise<ReconcileOutcome> => {
    const before = new Set(link.returns.active());
    const outcome = await leases.reconcile();
    const serving = new Set(link.returns.active());
    // Lost leases were counted when reconcile decided them (`onLost`).
    metrics.reconciled({ ...outcome, lost: [], adopted: outcome.adopted.filter((id) => !before.has(id) && serving.has(id)) });
    return outcome;
  };
  const reconcileQuotas = async (): Promise<void> => {
    const { released, adopted } = await quotas.reconcile(await liveLeaseIds(), (id) => leaseStore.holdOf(id));
    if (released.length + adopted.length > 0) log.info({ released, adopted }, 'tenant quota reservations reconciled with the leases');
  };
  return {
    app,
    leases,
    ownership,
    metrics,
    async startBackground({ reconcileIntervalMs = 5000, poolIntervalMs = 1000 } = {}) {
      const outcome = await reconcile();
      await reconcileQuotas();
      expiry.start((leaseId) => leases.onExpiryTimer(leaseId));
      every(reconcileIntervalMs, 'reconcile', reconcile);
      every(reconcileIntervalMs, 'quota reconcile', reconcileQuotas);
      every(reconcileIntervalMs, 'approval expiry', () => approvals.expireDue());
      if (pools) every(poolIntervalMs, 'warm pools', () => pools.maintain());
      every(10 * 60_000, 'artifact sweep', () => artifacts.sweep(24 * 3600_000)); // expired records' files, parts abandoned for a day
      every(60_000, 'snapshot expiry', () => snapshots.sweep()); // past retention, unless a sandbox started from one runs
      every(10 * 60_000, 'image survey sweep', () => runtime.sweepImageSurvey()); // of images the engine no longer has
      return outcome;
    },
    async close() {
      await background.stop();
      await app.close();
      await expiry.close();
      await link.close();
      await egress.close();
      await tunnels.close();
      if (links) await links.close();
      await previewLog.close();
      await notifier.close();
      leaseStore.close();
      await runtime.close?.();
      await tracing.shutdown(); // what is batched is exported before the process goes
      redis.disconnect();
    },
  };
}
