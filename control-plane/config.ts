/**
 * Control-plane settings, read once from `SBX_*` environment variables by `main.ts` (and by the
 * test harness). Every setting is documented in the README's settings table.
 */
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { DEFAULT_DATA_DIR, dataDirLayout } from '../contract/data-dir.js';
import { BuildPolicy } from './images/schema.js';
import { PoolSpec } from './pools/schema.js';
import { QuotaLimits } from './quotas/schema.js';
import { KubernetesEnv, RuntimeKind, isLabelValue, kubernetesSettings, type KubernetesSettings } from './runtime/schema.js';
import { tracingSettings, type TracingSettings } from './telemetry/schema.js';

/** A setting holding JSON (default `fallback`), parsed before its schema checks it. */
function jsonSetting(fallback: string, what: string) {
  return z
    .string()
    .default(fallback)
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: `must be ${what}` });
        return z.NEVER;
      }
    });
}

/** A comma-separated list setting (default empty): its items trimmed (lower-cased with `lowerCase`), empty ones dropped. */
function listSetting(lowerCase = false) {
  return z
    .string()
    .default('')
    .transform((s) =>
      s
        .split(',')
        .map((x) => (lowerCase ? x.trim().toLowerCase() : x.trim()))
        .filter(Boolean),
    );
}

/** `host:port`, the port 1–65535 (0 for a listener: any free port). */
const HostPort = z
  .string()
  .regex(/^[^:]+:\d{1,5}$/, 'host:port')
  .refine((a) => Number(a.slice(a.lastIndexOf(':') + 1)) <= 65535, 'a port of at most 65535');

const Env = KubernetesEnv.extend({
  /**
   * Where the agent link listener listens (`host:port`): agents on other machines reach it through
   * their node's relay (contract/link.ts). Default: off.
   */
  SBX_LINK_LISTEN: HostPort.optional(),
  /**
   * The address (`host:port`) at which the other control-plane replicas reach this process's link
   * listener, to pass on agent connections it serves (agent-link/link-peers.ts). Default: SBX_LINK_LISTEN,
   * which must then name an address, not all of them (0.0.0.0).
   */
  SBX_LINK_ADVERTISE: HostPort.optional(),
  /**
   * PEM files of the certificate and key the link listener serves TLS with (both or neither). Set,
   * node relays dial it with `tls:` and replicas pass connections on over TLS; every replica of an
   * installation sets them, and trusts the others' issuer (`NODE_EXTRA_CA_CERTS` for a private
   * CA). Default: plain TCP, for links inside one machine or a network of their own.
   */
  SBX_LINK_TLS_CERT: z.string().min(1).optional(),
  SBX_LINK_TLS_KEY: z.string().min(1).optional(),
  /**
   * The name (DNS name or address) every replica's link certificate carries, checked when a
   * replica passes a connection on to another at its advertised address: where those are Pod IPs,
   * which no certificate can list ahead, the link Service's name. Default: the advertised host.
   */
  SBX_LINK_TLS_PEER_NAME: z.string().min(1).optional(),
  /**
   * Where artifacts are kept. Replicas must share it (one volume mounted by each), as they share
   * Redis: an artifact is written by the replica its agent brought it to and read by any.
   * Default: `<SBX_DATA_DIR>/artifacts`.
   */
  SBX_ARTIFACT_DIR: z.string().min(1).optional(),
  /**
   * The node relay's sockets directory on the nodes (Kubernetes driver): set, sandboxes reach
   * Redis, the egress proxy and the byte tunnels through the relay, never through this host's
   * sockets. Needs SBX_LINK_LISTEN. Default: off.
   */
  SBX_AGENT_RELAY_DIR: z.string().optional(),
  /** Which runtime driver runs the sandboxes: `docker` (default) or `kubernetes` (the `SBX_K8S_*` settings). */
  SBX_RUNTIME: RuntimeKind.default('docker'),
  /** Default and largest retention of a snapshot, seconds. Default 604 800 (7 days). */
  SBX_SNAPSHOT_TTL_SECONDS: z.coerce.number().int().positive().default(604_800),
  /** Bytes of snapshots one tenant may keep (sum of their `sizeBytes`). Default 21 474 836 480 (20 GiB). */
  SBX_SNAPSHOT_QUOTA_BYTES: z.coerce
    .number()
    .int()
    .nonnegative()
    .default(20 * 1024 ** 3),
  /** Largest `count` of `POST /v1/snapshots/:id/fork` and `POST /v1/sandboxes {snapshot, count}`. Default 64. */
  SBX_FORK_MAX: z.coerce.number().int().min(1).max(1000).default(64),
  /** TCP port of the API. Default 7070. */
  SBX_PORT: z.coerce.number().int().min(0).max(65535).default(7070),
  /** Listen address. Default 127.0.0.1 (loopback only). */
  SBX_HOST: z.string().default('127.0.0.1'),
  /** State directory: API key, Redis files and socket, lease credential files, upload spool. Default /var/lib/sbx. */
  SBX_DATA_DIR: z.string().default(DEFAULT_DATA_DIR),
  /** Redis URL (`redis://user:pass@host:port`) or `unix:///path/to.sock`. Default: the socket setup.sh starts under the data dir. */
  SBX_REDIS_URL: z.string().optional(),
  /** Password of the Redis default user, when not in the URL. Default: `<data dir>/redis/password` if present. */
  SBX_REDIS_PASSWORD: z.string().optional(),
  /** Redis socket bind-mounted into sandboxes for the agent's channel. Default: the path of a `unix://` SBX_REDIS_URL. */
  SBX_AGENT_REDIS_SOCKET: z.string().optional(),
  /** Prefix of every Redis key sbx writes. Default `sbx:`. */
  SBX_REDIS_PREFIX: z.string().default('sbx:'),
  /**
   * AES-256 key the secret store encrypts values with: base64 of exactly 32 bytes (e.g.
   * `openssl rand -base64 32`). Default: `<data dir>/secrets-key`, generated (mode 0600) on first start.
   */
  SBX_SECRETS_KEY: z
    .string()
    .refine((v) => /^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length === 32, 'must be base64 of exactly 32 bytes')
    .optional(),
  /**
   * HMAC key of signed preview URLs: base64 of exactly 32 bytes. Default: `<data dir>/preview-key`,
   * generated (mode 0600) on first start; control planes behind one load balancer share it.
   */
  SBX_PREVIEW_KEY: z
    .string()
    .refine((v) => /^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length === 32, 'must be base64 of exactly 32 bytes')
    .optional(),
  /**
   * Host-based preview routing: a request whose Host is `<port>-<sandbox id>.<this>` (e.g.
   * `preview.example.com`, or `preview.localhost:7070` with the API's port) is a preview of that
   * port, and signed URLs use that form. Needs a wildcard DNS name pointing at the API. Default: off.
   */
  SBX_PREVIEW_DOMAIN: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?$/, 'a lower-case DNS name, optionally with :port')
    .optional(),
  /** How long a sandbox's agent has to bring a preview connection before the request is `504 preview.agent_unreachable`, ms. Default 10 000. */
  SBX_PREVIEW_DIAL_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(10_000),
  /** Sandboxes booting at once (leases/boot-gate.ts), 0: no limit. Default: Docker 2 × CPUs (≥ 2), Kubernetes 0 (nodes boot their pods). */
  SBX_BOOT_CONCURRENCY: z.preprocess((v) => (v === '' ? undefined : v), z.coerce.number().int().min(0).max(10_000).optional()),
  /** How long a client has to send a whole request, headers and body, before `408 input.request_timeout`, ms. Default 300 000 (Node's own, which fastify turns off). */
  SBX_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(1000).max(3_600_000).default(300_000),
  /** Bearer API key. Default: `<data dir>/api-key`, generated and printed on first start. */
  SBX_API_KEY: z.string().min(16).optional(),
  /** Identity of this installation, written as the `sbx.owner` label on everything it creates. Default `sbx`. */
  SBX_OWNER: z
    .string()
    .regex(/^[a-zA-Z0-9_.-]+$/)
    .default('sbx'),
  /**
   * Default sandbox image. Default: the image images/build.sh built from this checkout's agent
   * (its tag in `dist/.sbx-image`), so the control plane and the agent speak the same contract;
   * else `sbx-sandbox:latest`.
   */
  SBX_IMAGE: z.string().optional(),
  /**
   * The agent runtime directory mounted read-only at /opt/sbx in every sandbox (node with its own
   * libraries, tini, busybox, GNU tar, the agent; images/runtime/build-runtime.sh). Default: the
   * one setup built for this checkout (its path in `dist/.sbx-runtime`).
   */
  SBX_AGENT_RUNTIME: z.string().optional(),
  /** Directory of policy files. Default `<repo>/policies`. */
  SBX_POLICY_DIR: z.string().optional(),
  /** Docker engine socket. Default: the path of `DOCKER_HOST` when that is `unix://…` (as the docker CLI reads it), else /var/run/docker.sock. */
  SBX_DOCKER_SOCKET: z.string().optional(),
  /** The docker CLI's engine address; only a `unix://` one is used (for SBX_DOCKER_SOCKET's default). */
  DOCKER_HOST: z.string().optional(),
  /** Largest accepted upload (tar) body, bytes. Default 2 GiB. */
  SBX_MAX_UPLOAD_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(2 * 1024 * 1024 * 1024),
  /** Largest persistent volume (`POST /v1/volumes` `sizeBytes`), bytes. Default 64 GiB. */
  SBX_VOLUME_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(64 * 1024 * 1024 * 1024),
  /** How long an ended sandbox's calls, events and receipts stay readable, seconds. Default 7 days. */
  SBX_LEDGER_RETENTION_SECONDS: z.coerce
    .number()
    .int()
    .positive()
    .default(7 * 24 * 3600),
  /** A remote MCP session (`/mcp`) unused this long ends and its sandbox is released, seconds. Default 30 min. */
  SBX_MCP_IDLE_SECONDS: z.coerce.number().int().positive().default(1800),
  /**
   * DNS servers the egress proxy resolves sandbox destinations with, comma-separated `ip` or
   * `ip:port`. Default: the host's (resolv.conf).
   */
  SBX_EGRESS_DNS_SERVERS: listSetting(),
  /**
   * A PEM file of CA certificates the egress proxy also trusts when it verifies the servers of
   * intercepted hosts (credential injection), besides the public roots Node carries.
   */
  SBX_EGRESS_UPSTREAM_CA: z.string().regex(/^\//, 'an absolute path').optional(),
  /**
   * Host directories (comma-separated absolute paths) that policies' read-only mounts may come
   * from. Default none: a policy with a read-only mount is refused.
   */
  SBX_MOUNT_ALLOWLIST: listSetting().pipe(z.array(z.string().regex(/^\//, 'absolute paths'))),
  /**
   * Warm pools, a JSON array of `{policy, image?, min, max, idleSeconds?}` (see
   * control-plane/pools/warm-pools.ts). Default none: every lease starts cold.
   */
  SBX_WARM_POOLS: jsonSetting('[]', 'a JSON array').pipe(z.array(PoolSpec)),
  /**
   * Quota of every tenant an admin set none for (`PUT /v1/tenants/:tenant/quota`), as JSON:
   * `{"maxSandboxes": 10, "maxCpus": 8, "maxMemoryBytes": 17179869184}`; a field left out or
   * null is no limit. Default `{}`: no limits.
   */
  SBX_DEFAULT_TENANT_QUOTA: jsonSetting('{}', 'a JSON object').pipe(QuotaLimits),
  /**
   * Directory of the admin console's built files (`node console/build.mjs` writes them), served
   * at `/console`. Default `<repo>/dist/console`.
   */
  SBX_CONSOLE_DIR: z.string().optional(),
  /**
   * Registries images may be pulled from on demand, comma-separated `host[:port]` (`docker.io`
   * for references without a registry). Default none: nothing is ever pulled, and a reference
   * naming a registry is refused (`image.registry_not_allowed`).
   */
  SBX_IMAGE_REGISTRIES: listSetting(true).pipe(z.array(z.string().regex(/^[a-z0-9.-]+(:[0-9]{1,5})?$/, 'host[:port]'))),
  /**
   * The admin build policy of `POST /v1/images`, as JSON: `{"network": "none", "cpus": 1,
   * "memoryBytes": 2147483648, "timeoutSeconds": 600, "maxContextBytes": 536870912}` (these are
   * the defaults; control-plane/images/schema.ts). `network: {"allow": [hosts]}` is refused
   * with `policy.unenforceable`.
   */
  SBX_IMAGE_BUILD_POLICY: jsonSetting('{}', 'a JSON object').pipe(BuildPolicy),
  /** pino log level. Default `info`. */
  SBX_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

/** The names of every setting `loadConfig` reads (deploy manifests are checked against them). */
export const SETTING_NAMES: readonly string[] = Object.keys(Env.shape);

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  redis: { path?: string; url?: string; password?: string };
  agentRedisSocket: string;
  redisPrefix: string;
  apiKey: string | undefined;
  /** The secret store's AES-256 key (32 bytes); main.ts fills it from `<data dir>/secrets-key` when unset. */
  secretsKey: Buffer | undefined;
  /** HMAC key of signed preview URLs (32 bytes); main.ts fills it from `<data dir>/preview-key` when unset. */
  previewKey: Buffer | undefined;
  /** Host-based preview routing's domain (may carry `:port`), or null when off. */
  previewDomain: string | null;
  /** How long the agent has to bring a preview connection, ms. */
  previewDialTimeoutMs: number;
  /** How long a whole request may take to arrive, ms. */
  requestTimeoutMs: number;
  /** Sandboxes booting at once (leases/boot-gate.ts), 0 for no limit. */
  bootConcurrency: number;
  owner: string;
  image: string;
  /** Host directory of the agent runtime, mounted read-only at /opt/sbx in every sandbox. */
  agentRuntimeDir: string;
  policyDir: string;
  dockerSocket: string;
  /** The agent link listener's address (`SBX_LINK_LISTEN`), or null when off. */
  linkListen: { host: string; port: number } | null;
  /** Where other replicas reach the link listener (`SBX_LINK_ADVERTISE`, else SBX_LINK_LISTEN), or null when off. */
  linkAdvertise: string | null;
  /** The link listener's TLS certificate and key files and the replicas' certificate name, or null: plain TCP. */
  linkTls: { certFile: string; keyFile: string; peerName: string | null } | null;
  /** Artifact files (`SBX_ARTIFACT_DIR`, default `<data dir>/artifacts`); shared by replicas. */
  artifactDir: string;
  /** The node relay's sockets directory on the nodes (`SBX_AGENT_RELAY_DIR`), or null. */
  agentRelayDir: string | null;
  /** The runtime driver: Docker (`dockerSocket`), or Kubernetes with its settings. */
  runtime: { kind: 'docker' } | ({ kind: 'kubernetes' } & KubernetesSettings);
  maxUploadBytes: number;
  /** Largest persistent volume, bytes (default 64 GiB). */
  volumeMaxBytes?: number;
  ledgerRetentionSeconds: number;
  /** Idle time after which a remote MCP session ends, seconds (`SBX_MCP_IDLE_SECONDS`). */
  mcpIdleSeconds: number;
  /** Where traces go over OTLP/HTTP, from the standard `OTEL_*` variables (telemetry/schema.ts); null: tracing off (the default). */
  tracing: TracingSettings | null;
  /** Snapshot retention, quota and fork bound (`SBX_SNAPSHOT_TTL_SECONDS`, `SBX_SNAPSHOT_QUOTA_BYTES`, `SBX_FORK_MAX`). */
  snapshots: { ttlSeconds: number; quotaBytes: number; forkMax: number };
  logLevel: z.infer<typeof Env>['SBX_LOG_LEVEL'];
  /** Host directories read-only mounts may come from. */
  mountAllowlist: string[];
  /** Warm pools to keep filled. */
  warmPools: PoolSpec[];
  /** DNS servers of the egress proxy (`ip` or `ip:port`); empty = the host's. */
  egressDnsServers: string[];
  /** `SBX_EGRESS_UPSTREAM_CA`: extra roots for verifying intercepted hosts' servers, or null. */
  egressUpstreamCaFile: string | null;
  /** Quota of tenants without one of their own. */
  defaultTenantQuota: QuotaLimits;
  /** Built admin console served at `/console`. */
  consoleDir: string;
  /** Registries images are pulled from on demand (`host[:port]`); empty: none. */
  imageRegistries: string[];
  /** Limits and network of image builds. */
  imageBuildPolicy: BuildPolicy;
}

/**
 * Parses settings from `env`. Throws a ZodError naming the bad variable, or an Error when no
 * Redis socket for the agents can be determined.
 */
export function loadConfig(env: NodeJS.ProcessEnv, repoRoot: string): Config {
  const e = Env.parse(env);
  const layout = dataDirLayout(e.SBX_DATA_DIR);
  const url = e.SBX_REDIS_URL ?? `unix://${layout.redisSocket}`;
  const password =
    e.SBX_REDIS_PASSWORD ?? (existsSync(layout.redisPassword) ? readFileSync(layout.redisPassword, 'utf8').trim() : undefined);
  const unixPath = url.startsWith('unix://') ? url.slice('unix://'.length) : undefined;
  const agentRedisSocket = e.SBX_AGENT_REDIS_SOCKET ?? unixPath;
  if (!agentRedisSocket) throw new Error('SBX_AGENT_REDIS_SOCKET must be set when SBX_REDIS_URL is not a unix:// socket');
  if (e.SBX_RUNTIME === 'kubernetes' && !isLabelValue(e.SBX_OWNER))
    throw new Error(
      `SBX_OWNER ${JSON.stringify(e.SBX_OWNER)} is not a Kubernetes label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)`,
    );
  if (e.SBX_AGENT_RELAY_DIR !== undefined && e.SBX_LINK_LISTEN === undefined)
    throw new Error('SBX_AGENT_RELAY_DIR needs SBX_LINK_LISTEN: the node relays forward the agents to the link listener');
  // Node binds 0, 0.0.0.0 and 0.0.0.00 alike to every address: none can be advertised.
  const unspecified = (address: string | undefined): boolean => address !== undefined && /^0+(\.0+)*:/.test(address);
  if (unspecified(e.SBX_LINK_LISTEN) && e.SBX_LINK_ADVERTISE === undefined)
    throw new Error(
      `SBX_LINK_LISTEN ${e.SBX_LINK_LISTEN} listens on every address: set SBX_LINK_ADVERTISE to the one the other control planes reach it at`,
    );
  if (unspecified(e.SBX_LINK_ADVERTISE))
    throw new Error(`SBX_LINK_ADVERTISE ${e.SBX_LINK_ADVERTISE} names no address another process can reach`);
  const linkOnly = ['SBX_LINK_ADVERTISE', 'SBX_LINK_TLS_CERT', 'SBX_LINK_TLS_PEER_NAME'] as const;
  const withoutListener = linkOnly.filter((name) => e[name] !== undefined && e.SBX_LINK_LISTEN === undefined);
  if (withoutListener.length > 0) throw new Error(`${withoutListener.join(', ')} need SBX_LINK_LISTEN: they are the link listener's`);
  if ((e.SBX_LINK_TLS_CERT === undefined) !== (e.SBX_LINK_TLS_KEY === undefined))
    throw new Error('SBX_LINK_TLS_CERT and SBX_LINK_TLS_KEY go together: the link listener serves TLS with both');
  const redis: Config['redis'] = { ...(unixPath ? { path: unixPath } : { url }), ...(password === undefined ? {} : { password }) };
  return {
    port: e.SBX_PORT,
    host: e.SBX_HOST,
    dataDir: e.SBX_DATA_DIR,
    redis,
    agentRedisSocket,
    redisPrefix: e.SBX_REDIS_PREFIX,
    apiKey: e.SBX_API_KEY,
    secretsKey: e.SBX_SECRETS_KEY === undefined ? undefined : Buffer.from(e.SBX_SECRETS_KEY, 'base64'),
    previewKey: e.SBX_PREVIEW_KEY === undefined ? undefined : Buffer.from(e.SBX_PREVIEW_KEY, 'base64'),
    previewDomain: e.SBX_PREVIEW_DOMAIN ?? null,
    previewDialTimeoutMs: e.SBX_PREVIEW_DIAL_TIMEOUT_MS,
    requestTimeoutMs: e.SBX_REQUEST_TIMEOUT_MS,
    bootConcurrency: e.SBX_BOOT_CONCURRENCY ?? (e.SBX_RUNTIME === 'kubernetes' ? 0 : Math.max(2, 2 * availableParallelism())),
    owner: e.SBX_OWNER,
    image: e.SBX_IMAGE ?? builtFile(repoRoot, '.sbx-image') ?? 'sbx-sandbox:latest',
    agentRuntimeDir: e.SBX_AGENT_RUNTIME ?? builtFile(repoRoot, '.sbx-runtime') ?? join(repoRoot, 'dist', 'sbx-runtime', 'missing'),
    policyDir: e.SBX_POLICY_DIR ?? join(repoRoot, 'policies'),
    dockerSocket:
      e.SBX_DOCKER_SOCKET ?? (e.DOCKER_HOST?.startsWith('unix://') ? e.DOCKER_HOST.slice('unix://'.length) : '/var/run/docker.sock'),
    linkListen:
      e.SBX_LINK_LISTEN === undefined
        ? null
        : { host: e.SBX_LINK_LISTEN.slice(0, e.SBX_LINK_LISTEN.lastIndexOf(':')), port: Number(e.SBX_LINK_LISTEN.split(':').pop()) },
    linkAdvertise: e.SBX_LINK_ADVERTISE ?? e.SBX_LINK_LISTEN ?? null,
    linkTls:
      e.SBX_LINK_TLS_CERT && e.SBX_LINK_TLS_KEY
        ? { certFile: e.SBX_LINK_TLS_CERT, keyFile: e.SBX_LINK_TLS_KEY, peerName: e.SBX_LINK_TLS_PEER_NAME ?? null }
        : null,
    artifactDir: e.SBX_ARTIFACT_DIR ?? join(e.SBX_DATA_DIR, 'artifacts'),
    agentRelayDir: e.SBX_AGENT_RELAY_DIR ?? null,
    runtime: e.SBX_RUNTIME === 'kubernetes' ? { kind: 'kubernetes', ...kubernetesSettings(e) } : { kind: 'docker' },
    maxUploadBytes: e.SBX_MAX_UPLOAD_BYTES,
    volumeMaxBytes: e.SBX_VOLUME_MAX_BYTES,
    ledgerRetentionSeconds: e.SBX_LEDGER_RETENTION_SECONDS,
    mcpIdleSeconds: e.SBX_MCP_IDLE_SECONDS,
    tracing: tracingSettings(env),
    snapshots: { ttlSeconds: e.SBX_SNAPSHOT_TTL_SECONDS, quotaBytes: e.SBX_SNAPSHOT_QUOTA_BYTES, forkMax: e.SBX_FORK_MAX },
    logLevel: e.SBX_LOG_LEVEL,
    egressDnsServers: e.SBX_EGRESS_DNS_SERVERS,
    egressUpstreamCaFile: e.SBX_EGRESS_UPSTREAM_CA ?? null,
    mountAllowlist: e.SBX_MOUNT_ALLOWLIST,
    warmPools: e.SBX_WARM_POOLS,
    defaultTenantQuota: e.SBX_DEFAULT_TENANT_QUOTA,
    consoleDir: e.SBX_CONSOLE_DIR ?? join(repoRoot, 'dist', 'console'),
    imageRegistries: e.SBX_IMAGE_REGISTRIES,
    imageBuildPolicy: e.SBX_IMAGE_BUILD_POLICY,
  };
}

/**
 * What deploy/local/setup.sh recorded for this checkout in `dist/<name>`, if any: the tag of the
 * image it built (`.sbx-image`), the agent runtime directory (`.sbx-runtime`).
 */
function builtFile(repoRoot: string, name: string): string | undefined {
  const file = join(repoRoot, 'dist', name);
  return existsSync(file) ? readFileSync(file, 'utf8').trim() || undefined : undefined;
}
