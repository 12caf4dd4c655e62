/**
 * `buildApp(deps)`: the fastify application with every domain plugin registered, not started.
 * Dependencies come in; nothing here reads the environment or listens (main.ts does).
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Logger } from 'pino';
import { apiKeysRoutes } from './api-keys/routes.js';
import type { ApiKeyService } from './api-keys/service.js';
import { artifactsRoutes } from './artifacts/routes.js';
import type { ArtifactStore } from './artifacts/store.js';
import { auditRoutes } from './audit/routes.js';
import type { AuditLog } from './audit/service.js';
import { callsRoutes } from './calls/routes.js';
import type { ApprovalService } from './calls/approval-service.js';
import { terminalsRoutes } from './terminals/routes.js';
import type { TerminalService } from './terminals/service.js';
import type { LiveIn } from './agent-link/live-in.js';
import { CallId } from './calls/schema.js';
import type { CallService } from './calls/service.js';
import type { CallStore } from './calls/store.js';
import { CONSOLE_ROUTES, consoleRoutes } from './console/routes.js';
import { egressRoutes } from './egress/routes.js';
import type { EgressLog } from './egress/store.js';
import { filesRoutes } from './files/routes.js';
import { realpathThroughAgent, type TransferTunnels } from './files/transfers.js';
import { tarError } from './runtime/transfer-errors.js';
import { apiKeyAuthenticator, installApiKeyAuth, type PrincipalLookup } from './http/auth.js';
import { installUpgradeSocketTracking } from './http/upgrade.js';
import { imagesRoutes } from './images/routes.js';
import type { ImageService } from './images/service.js';
import type { ImageStore } from './images/store.js';
import { edgeServerOptions, installErrorHandling, trackAnswersBeforeBody } from './http/errors.js';
import { installLeaseGuard } from './http/lease-guard.js';
import { DOCS_ROUTES, installOpenApi, installZodValidation } from './http/openapi.js';
import { metricsRoutes } from './metrics/routes.js';
import { mcpRoutes } from './mcp/routes.js';
import { installFreshConnectionClosing } from './http/connections.js';
import { E2bFilesystem } from './e2b/filesystem.js';
import { E2bProcesses } from './e2b/processes.js';
import { e2bApiRoutes, e2bEnvdRoutes } from './e2b/routes.js';
import { E2bSandboxes } from './e2b/sandboxes.js';
import { E2bWatch } from './e2b/watch.js';
import type { E2bProcessStore } from './e2b/store.js';
import type { Metrics } from './metrics/service.js';
import type { Tracing } from './telemetry/tracing.js';
import { leasesRoutes } from './leases/routes.js';
import { LeaseParams } from './leases/schema.js';
import type { LeaseService } from './leases/service.js';
import { policiesRoutes } from './policies/routes.js';
import { previewFastPath, type RequestListener } from './previews/fast-path.js';
import { previewHostRewrite, previewRoutes } from './previews/routes.js';
import type { PreviewService } from './previews/service.js';
import type { PolicyService } from './policies/service.js';
import type { ProposalService } from './policies/proposal-service.js';
import { quotasRoutes } from './quotas/routes.js';
import type { QuotaService } from './quotas/service.js';
import type { Notifier } from './redis/notifier.js';
import type { SandboxRuntime } from './runtime/runtime.js';
import { secretsRoutes } from './secrets/routes.js';
import { processesRoutes } from './processes/routes.js';
import type { ProcessService } from './processes/service.js';
import { snapshotsRoutes } from './snapshots/routes.js';
import type { SnapshotService } from './snapshots/service.js';
import type { SecretService } from './secrets/service.js';
import { sessionsRoutes } from './sessions/routes.js';
import type { SessionService } from './sessions/service.js';
import { volumesRoutes } from './volumes/routes.js';
import { watchRoutes } from './watch/routes.js';
import { WatchService } from './watch/service.js';
import type { RedisChangeLog } from './watch/store.js';
import type { VolumeService } from './volumes/service.js';

export interface AppDeps {
  log: Logger;
  /** The bootstrap admin key (tenant `default`). */
  apiKey: string;
  /** Finds the other API keys by digest. */
  lookupPrincipal: PrincipalLookup;
  apiKeys: ApiKeyService;
  policies: PolicyService;
  /** Allowlist proposals from denied egress (policies/proposal-service.ts). */
  proposals: ProposalService;
  audit: AuditLog;
  leases: LeaseService;
  calls: CallService;
  /** Calls waiting for approval: approve, deny (calls/approval-service.ts). */
  approvals: ApprovalService;
  terminals: TerminalService;
  /** Terminals' output as agents write it (the WebSocket attach). */
  live: Pick<LiveIn, 'subscribe'>;
  callStore: CallStore;
  /** Shell sessions (issue 13 part 2). */
  sessions: SessionService;
  egressLog: EgressLog;
  notifier: Notifier;
  runtime: SandboxRuntime;
  artifacts: ArtifactStore;
  secrets: SecretService;
  quotas: QuotaService;
  volumes: VolumeService;
  images: ImageService;
  imageStore: ImageStore;
  /** Largest image build context, bytes. */
  maxImageContextBytes: number;
  snapshots: SnapshotService;
  /** The sandbox's processes (list, signal). */
  processes: ProcessService;
  /** Port previews (routes, signed URLs, host-based routing when it has a preview domain). */
  previews: PreviewService;
  /** Rendered by the public `GET /metrics`. */
  metrics: Metrics;
  /** The E2B-compatible API's parts (e2b/): its process ids, the key of its envd access tokens, the preview domain (`getHost`). */
  e2b: { processStore: E2bProcessStore; tokenKey: Buffer; previewDomain: string | null };
  /** Spans of lease creates and releases and of calls (telemetry/tracing.ts; TRACING_OFF unless OTLP is configured). */
  tracing: Tracing;
  /** Resolves when Redis answers; rejects otherwise. */
  pingRedis: () => Promise<unknown>;
  spoolDir: string;
  maxUploadBytes: number;
  /** The agent tunnels file transfers go through. */
  transfers: TransferTunnels;
  /** The lease file change logs (file watch). */
  changeLog: RedisChangeLog;
  /** Largest JSON body, bytes. Default 1 MiB. */
  jsonBodyLimitBytes?: number;
  /** How long a whole request (headers and body) may take to arrive before `408 input.request_timeout`, ms. */
  requestTimeoutMs: number;
  /** Built admin console served (publicly) at `/console`. */
  consoleDir: string;
  /** The version the OpenAPI document states (package.json's). */
  version: string;
  /** A remote MCP session (`/mcp`) unused this long ends, seconds. Default 1800. */
  mcpIdleSeconds?: number;
}

/** Ids in the params of `/v1/sandboxes/:id/...` routes, as log bindings: `sandboxId`, and `callId` on call routes. */
const SandboxLogIds = z
  .object({ id: LeaseParams.shape.id, callId: CallId.optional() })
  .transform(({ id, callId }) => (callId === undefined ? { sandboxId: id } : { sandboxId: id, callId }));

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const authenticate = apiKeyAuthenticator({ bootstrapKey: deps.apiKey, lookup: deps.lookupPrincipal });
  const leaseGuard = { visible: deps.leases.visible.bind(deps.leases), usable: deps.leases.usable.bind(deps.leases) };
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: deps.jsonBodyLimitBytes ?? 1024 * 1024,
    requestIdHeader: 'x-request-id',
    // A body that stops arriving is answered (408) and its connection closed; fastify's default
    // (0) would hold it forever. Node enforces it only while headersTimeout (its default 60 s) is
    // not longer, and checks every 30 s, or sooner for a shorter limit.
    requestTimeout: deps.requestTimeoutMs,
    http: {
      requestTimeout: deps.requestTimeoutMs,
      headersTimeout: Math.min(60_000, deps.requestTimeoutMs),
      connectionsCheckingInterval: Math.min(30_000, deps.requestTimeoutMs),
    },
    // Host-based previews: a request to `<port>-<id>.<preview domain>` is routed as a preview, whatever its path.
    rewriteUrl: (req) => previewHostRewrite(deps.previews, req.headers.host, req.url ?? '/') ?? req.url ?? '/',
    // Errors that fastify and Node's parser answer before any route runs get the documented shape too.
    ...edgeServerOptions(deps.log),
  });
  // The preview fast path goes ahead of fastify's router, on fastify's own server: fastify serves
  // what it does not take, and everything once the app is closing (previews/fast-path.ts).
  let closing = false;
  const [routed] = app.server.listeners('request') as RequestListener[];
  app.server.removeListener('request', routed!);
  app.server.on(
    'request',
    previewFastPath({ previews: deps.previews, authenticate, leases: leaseGuard, log: deps.log, closing: () => closing }, routed!),
  );
  app.addHook('preClose', async () => {
    closing = true;
  });
  installErrorHandling(app);
  trackAnswersBeforeBody(app.server);
  installUpgradeSocketTracking(app);
  installFreshConnectionClosing(app);
  // JSON only: a text/plain body would otherwise reach the schemas as a string.
  app.removeContentTypeParser('text/plain');
  installApiKeyAuth(app, {
    authenticate,
    // Signed URLs carry their own credential (http/signed-urls.ts): previews and terminal attach.
    // The E2B-compatible API authenticates itself (X-API-KEY, X-Access-Token; e2b/routes.ts).
    publicRoutes: [
      '/healthz',
      '/metrics',
      '/v1/previews/*',
      '/v1/host-previews/*',
      '/v1/terminal-ws/*',
      '/e2b/*',
      ...CONSOLE_ROUTES,
      ...DOCS_ROUTES,
    ],
  });
  // Every log line of a request about one sandbox or call says which (fastify's own request
  // lines too: they log through reply.log). Ids that are not well-formed are left out of logs.
  app.addHook('onRequest', async (request, reply) => {
    if (!request.routeOptions.url?.startsWith('/v1/sandboxes/:id')) return;
    const ids = SandboxLogIds.safeParse(request.params);
    if (ids.success) request.log = reply.log = request.log.child(ids.data);
  });

  installZodValidation(app);
  installLeaseGuard(app, leaseGuard);
  await installOpenApi(app, { version: deps.version });

  app.get(
    '/healthz',
    { schema: { tags: ['meta'], summary: 'Health: 200 when Redis and Docker answer, else 503', security: [] } },
    async (_request, reply) => {
      const [redis, docker] = await Promise.allSettled([deps.pingRedis(), deps.runtime.info()]);
      const body = { redis: redis.status === 'fulfilled' ? 'ok' : 'down', docker: docker.status === 'fulfilled' ? 'ok' : 'down' };
      return reply.status(body.redis === 'ok' && body.docker === 'ok' ? 200 : 503).send(body);
    },
  );

  // Before any plugin that wraps routes for WebSocket upgrades (http/upgrade.ts).
  await app.register(previewRoutes, { previews: deps.previews });
  await app.register(leasesRoutes, {
    leases: deps.leases,
    startMany: (snapshot, by, body, key) => deps.snapshots.startMany(snapshot, by, body, key),
    tracing: deps.tracing,
  });
  await app.register(callsRoutes, {
    leases: deps.leases,
    calls: deps.calls,
    approvals: deps.approvals,
    store: deps.callStore,
    notifier: deps.notifier,
    sessions: deps.sessions,
    tracing: deps.tracing,
  });
  await app.register(sessionsRoutes, { sessions: deps.sessions, calls: deps.calls, leases: deps.leases });
  await app.register(terminalsRoutes, {
    terminals: deps.terminals,
    live: deps.live,
    leases: deps.leases,
    store: deps.callStore,
    notifier: deps.notifier,
  });
  await app.register(artifactsRoutes, { artifacts: deps.artifacts });
  await app.register(egressRoutes, { egressLog: deps.egressLog });
  await app.register(apiKeysRoutes, { apiKeys: deps.apiKeys });
  await app.register(policiesRoutes, { policies: deps.policies, proposals: deps.proposals });
  await app.register(auditRoutes, { audit: deps.audit });
  await app.register(secretsRoutes, { secrets: deps.secrets });
  await app.register(quotasRoutes, { quotas: deps.quotas });
  await app.register(volumesRoutes, { volumes: deps.volumes });
  await app.register(snapshotsRoutes, { snapshots: deps.snapshots });
  await app.register(processesRoutes, { processes: deps.processes });
  await app.register(metricsRoutes, { metrics: deps.metrics });
  await app.register(consoleRoutes, { consoleDir: deps.consoleDir });
  await app.register(mcpRoutes, {
    idleMs: (deps.mcpIdleSeconds ?? 1800) * 1000,
    release: (id, by) => deps.leases.release(id, by),
  });
  await app.register(imagesRoutes, {
    images: deps.images,
    store: deps.imageStore,
    notifier: deps.notifier,
    spoolDir: deps.spoolDir,
    maxContextBytes: deps.maxImageContextBytes,
    egressLog: deps.egressLog,
  });
  await app.register(filesRoutes, { tunnels: deps.transfers, maxUploadBytes: deps.maxUploadBytes });
  const watch = new WatchService({
    log: deps.changeLog,
    paths: { realpath: (id, path) => realpathThroughAgent(deps.transfers, id, path, (end) => tarError(end.stderr, path)) },
  });
  const e2b = new E2bSandboxes({
    leases: deps.leases,
    snapshots: deps.snapshots,
    tokenKey: deps.e2b.tokenKey,
    previewDomain: deps.e2b.previewDomain,
    now: () => new Date(),
  });
  await app.register(e2bApiRoutes, { prefix: '/e2b/api', authenticate, sandboxes: e2b });
  await app.register(e2bEnvdRoutes, {
    prefix: '/e2b/envd',
    sandboxes: e2b,
    processes: new E2bProcesses({
      calls: deps.calls,
      events: deps.callStore,
      notifier: deps.notifier,
      terminals: deps.terminals,
      store: deps.e2b.processStore,
    }),
    filesystem: new E2bFilesystem({ calls: deps.calls }),
    watch: new E2bWatch({ watch, log: deps.changeLog }),
  });
  await app.register(watchRoutes, {
    watch,
    log: deps.changeLog,
    active: (id, by) => deps.leases.active(id, by),
  });
  return app;
}
