/**
 * The lease plan: everything a lease needs decided before anything is made — the policy
 * version, TTL, env, secret grants and values, image, and the compiled container spec. Every
 * check of a create happens here, so a refused create leaves nothing behind.
 */
import { realpath } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { PolicyRef, WritableRootEntry } from '../../contract/objects.js';
import type { SecretGrant, ToolUser } from '../../contract/queue.js';
import { compileSandboxSpec, type CompileInput } from '../policies/compiler.js';
import type { Policy } from '../policies/schema.js';
import type { ImageService, ResolvedImage } from '../images/service.js';
import type { PolicyService } from '../policies/service.js';
import { SNAPSHOT_ROOTS_PREFIX, type ImageConfig, type Ownership, type SandboxRuntime, type SandboxSpec } from '../runtime/runtime.js';
import type { SnapshotSource } from '../snapshots/schema.js';
import { CredentialInjection } from '../egress/credentials.js';
import { firstPhase } from '../policies/phases.js';
import type { SecretService } from '../secrets/service.js';
import type { ResolvedVolumeMount } from '../volumes/schema.js';
import type { VolumeService } from '../volumes/service.js';
import type { CreateSandboxBody, SecretRequest } from './schema.js';
import { DEFAULT_TOOL_USER, parseImageUser, resolveImageUser } from './tool-user.js';
import { withLeaseRoots } from './writable-roots.js';
import { EngineInfoCache } from './engine-info.js';

/** A lease's decisions before anything is made. */
export interface LeasePlan {
  /** The policy version, with the lease's own writable roots (if any) added to `filesystem.writableRoots`. */
  policy: Policy;
  /** Every writable root (`fromImage`: asked to start with the image's content), for the manifest. */
  roots: WritableRootEntry[];
  /** The snapshot the lease starts from (set by the create), for the manifest. */
  snapshot?: { id: string; digest: string; parentLeaseId: string } | null;
  ref: PolicyRef;
  ttlSeconds: number;
  env: Record<string, string>;
  grants: SecretGrant[];
  /** Secret values in clear, zeroed when the create ends (none of those the egress proxy injects). */
  values: Map<string, Buffer>;
  image: string;
  /** The image as the engine has it: its id, and the config the sandbox honours or records. */
  imageConfig: ImageConfig;
  /** The image's registry digest (`repo@sha256:…`) when it has one (a pulled image), else null. */
  imageDigest: string | null;
  /** Who the tools run as, and whose choice that was (tool-user.ts). */
  toolUser: ToolUser;
  engineVersion: string;
  spec: SandboxSpec;
  /** The persistent volumes it mounts, checked (their holds are taken by the create, `VolumeService.claim`). */
  volumes: ResolvedVolumeMount[];
}

/**
 * Host directories of a lease under the data dir: its agent credentials file (until the agent
 * read it), its egress proxy socket and its port preview tunnel sockets.
 */
export function leaseDirs(
  dataDir: string,
  id: string,
): { credentials: string; egress: string; previews: string; trust: string; egressCa: string } {
  return {
    credentials: join(dataDir, 'leases', id),
    egress: join(dataDir, 'egress', id),
    previews: join(dataDir, 'previews', id),
    // Credential injection: the lease CA's certificate for the sandbox, and its keys for this side alone.
    trust: join(dataDir, 'trust', id),
    egressCa: join(dataDir, 'egress-ca', id),
  };
}

export interface PlannerDeps {
  runtime: Pick<SandboxRuntime, 'info' | 'inspectImage' | 'readImageFiles'>;
  policies: Pick<PolicyService, 'resolve'>;
  /** Values of the secrets a lease is granted, for its agent only. */
  secrets: Pick<SecretService, 'reveal'>;
  /** Persistent volumes (none: a lease asking for one is refused as `policy.unenforceable`). */
  volumes?: Pick<VolumeService, 'resolveMounts'>;
  /**
   * Resolves the image a lease names (a tenant's built image, an engine image, a pull from an
   * allowlisted registry: control-plane/images/). Without it, only images on the engine are used.
   */
  images?: Pick<ImageService, 'resolve'>;
}

/** The node relay's sockets directory on the nodes, and the link key (`SBX_AGENT_RELAY_DIR`, `SBX_LINK_KEY`). */
export interface AgentRelay {
  dir: string;
  key: Buffer;
}

export interface PlannerOptions {
  /**
   * `SBX_OWNER` and this installation's id: written on everything the leases create, and the
   * only things reconcile, reaping and teardown ever list or remove.
   */
  ownership: Ownership;
  sbxVersion: string;
  dataDir: string;
  defaultImage: string;
  /** Host directory of the agent runtime, mounted read-only at /opt/sbx in every sandbox. */
  agentRuntimeDir: string;
  /** Host path of the Redis unix socket agents connect to. */
  agentRedisSocket: string;
  /**
   * The node relay (contract/link.ts), where sandboxes run on other machines: its sockets'
   * directory on the nodes, and the key of the leases' link tokens. Unset: agents use the
   * control plane's host sockets.
   */
  agentRelay?: AgentRelay;
  /** Host directories read-only mounts may come from (`SBX_MOUNT_ALLOWLIST`). */
  mountAllowlist: readonly string[];
  /** Host paths no read-only mount may contain: the data dir, the Docker and Redis sockets. */
  protectedHostPaths: readonly string[];
}

/** How long the engine's version and runtimes are used without asking again, up to when while a new answer is read, and how long a read may take (engine-info.ts), ms. */
const ENGINE_INFO_TIMING = { freshMs: 5000, staleMs: 60_000, readTimeoutMs: 10_000 };

export class LeasePlanner {
  private readonly engineInfo: EngineInfoCache;

  constructor(
    private readonly deps: PlannerDeps,
    private readonly options: PlannerOptions,
  ) {
    this.engineInfo = new EngineInfoCache(() => deps.runtime.info(), { ...ENGINE_INFO_TIMING, now: Date.now });
  }

  /**
   * Plans lease `id` from `body` (with `from`: a snapshot, whose captured roots seed the lease's;
   * the caller put its image, policy and roots into `body`). Throws `policy.not_found`, `policy.unenforceable`,
   * `lease.ttl_exceeds_policy`, `input.invalid` (env names the policy does not allow),
   * `policy.secret_denied`, `secret.not_found`, `secret.unreadable`,
   * `policy.mount_not_allowed`, `image.invalid_reference`, `image.registry_not_allowed`,
   * `image.not_found`, `image.pull_failed`, `image.user_not_found`, `runtime.unavailable`;
   * for `volumes` what `VolumeService.resolveMounts` throws; for `writableRoots` what
   * `withLeaseRoots` throws (`lease.writable_root_invalid`, `policy.writable_root_denied`,
   * `lease.writable_root_too_large`). `tenant` sees its own built images and volumes (null:
   * none); `from`: the snapshot the lease starts from.
   */
  async plan(id: string, body: CreateSandboxBody, tenant: string | null = null, from?: SnapshotSource): Promise<LeasePlan> {
    const { runtime, policies } = this.deps;
    const policyName = typeof body.policy === 'string' ? body.policy : (body.policy?.name ?? 'default');
    const policyVersion = typeof body.policy === 'object' ? body.policy.version : undefined;
    // The version and its snapshot are fixed here: a later PUT or DELETE of the policy never reaches this lease.
    const bound = await policies.resolve(policyName, policyVersion);
    const ref = bound.ref;
    const { policy: unphased, roots } = withLeaseRoots(bound.policy, body.writableRoots ?? []);
    // A phased policy holds in its first phase (policies/phases.ts); the secrets it may grant are all the policy's.
    const policy = firstPhase(unphased);
    const ttlSeconds = body.ttlSeconds ?? policy.resources.ttlSeconds;
    if (ttlSeconds > policy.resources.maxTtlSeconds) {
      throw new AppError(
        'lease.ttl_exceeds_policy',
        `ttlSeconds ${ttlSeconds} is above the policy's maxTtlSeconds ${policy.resources.maxTtlSeconds}`,
        {
          details: { field: 'ttlSeconds', max: policy.resources.maxTtlSeconds },
        },
      );
    }
    const env = body.env ?? {};
    const refused = policy.envAllowlist.length === 0 ? [] : Object.keys(env).filter((k) => !policy.envAllowlist.includes(k));
    if (refused.length > 0) {
      throw new AppError('input.invalid', `env names not allowed by policy ${ref.name}: ${refused.join(', ')}`, {
        details: { field: 'env', refused },
      });
    }
    const grants = (body.secrets ?? []).map(grantOf);
    const denied = grants.find((g) => !unphased.secrets.allowed.includes(g.name));
    if (denied) {
      throw new AppError('policy.secret_denied', `policy ${ref.name} does not allow secret ${denied.name}`, {
        details: { name: denied.name, policy: ref.name, field: 'secrets' },
      });
    }
    // A secret the egress proxy injects is not revealed: its agent gets the placeholder (provision.ts).
    const names = grants.map((g) => g.name);
    const injected = CredentialInjection.injected(policy, names);
    const values = await this.deps.secrets.reveal(names.filter((name) => !injected.includes(name)));
    const volumes = await this.planVolumes(policy, body, tenant);
    const image = body.image ?? this.options.defaultImage;
    // A tenant's built image, an engine image, or one pulled now from an allowlisted registry (images/).
    const resolved: ResolvedImage | null = this.deps.images ? await this.deps.images.resolve(image, tenant) : null;
    const engineRef = resolved?.engineRef ?? image;
    // The config of exactly the image resolve found, from its own inspect when it made one (one engine round trip per lease, not two).
    const [info, imageConfig] = await Promise.all([this.engineInfo.get(), resolved?.config ?? runtime.inspectImage(engineRef)]);
    const toolUser = await this.toolUser(policy, engineRef, imageConfig);
    const dirs = leaseDirs(this.options.dataDir, id);
    const spec = compileSandboxSpec({
      leaseId: id,
      ownership: this.options.ownership,
      sbxVersion: this.options.sbxVersion,
      image: engineRef,
      policy,
      policyRef: ref,
      agentConfigHostDir: dirs.credentials,
      agentRuntimeDir: this.options.agentRuntimeDir,
      toolUser,
      agentRedisSocketDir: dirname(this.options.agentRedisSocket),
      ...(this.options.agentRelay ? { agentRelayDir: this.options.agentRelay.dir } : {}),
      egressSocketHostDir: dirs.egress,
      previewSocketHostDir: dirs.previews,
      trustHostDir: dirs.trust,
      mounts: await resolveMounts(policy, this.options.mountAllowlist, this.options.protectedHostPaths),
      ociRuntimes: info.ociRuntimes,
      labels: body.labels ?? {},
      volumeMounts: volumes,
      ...(from ? { seedFrom: { prefix: SNAPSHOT_ROOTS_PREFIX, paths: from.capturedRoots } } : {}),
    });
    // Docker: the id resolve found (a cluster's registry images have none: their digest).
    const pinned = resolved?.imageId || imageConfig.repoDigests[0];
    if (pinned !== undefined && pinned !== '') spec.pinnedImage = pinned;
    const imageDigest = resolved?.digest ?? null;
    return {
      policy,
      roots,
      ref,
      ttlSeconds,
      env,
      grants,
      values,
      image,
      imageConfig,
      imageDigest,
      toolUser,
      engineVersion: info.engineVersion,
      spec,
      volumes,
    };
  }

  /** The lease's volume mounts, checked against the paths the policy already mounts. */
  private async planVolumes(policy: Policy, body: CreateSandboxBody, tenant: string | null): Promise<ResolvedVolumeMount[]> {
    const requests = body.volumes ?? [];
    if (requests.length === 0) return [];
    // Only a warm pool plans without a tenant, and it asks for no volumes.
    if (tenant === null) throw new AppError('input.invalid', 'volumes need a tenant', { details: { field: 'volumes' } });
    if (!this.deps.volumes)
      throw new AppError('policy.unenforceable', 'this control plane offers no persistent volumes', { details: { field: 'volumes' } });
    const taken = [...policy.filesystem.writableRoots.map((r) => r.path), ...policy.filesystem.readOnlyMounts.map((m) => m.containerPath)];
    return this.deps.volumes.resolveMounts(tenant, requests, taken);
  }

  /**
   * The policy's tool user; else the image's `User` unless root (read in the image's own
   * /etc/passwd and /etc/group); else the default. Throws `image.user_not_found`.
   */
  private async toolUser(policy: Policy, image: string, config: ImageConfig): Promise<ToolUser> {
    if (policy.runtime.toolUser) return { ...policy.runtime.toolUser, source: 'policy' };
    const wanted = parseImageUser(config.user);
    if (wanted === null) return DEFAULT_TOOL_USER;
    const [passwd, group] = await this.deps.runtime.readImageFiles(image, ['/etc/passwd', '/etc/group'], this.options.ownership);
    return resolveImageUser(wanted, passwd ?? null, group ?? null);
  }
}

/**
 * Resolves symlinks in the mount allowlist and in the policy's read-only mount host paths, for
 * the compiler to check one against the other (a path that does not exist resolves to null).
 */
async function resolveMounts(
  policy: Policy,
  allowlist: readonly string[],
  protectedHostPaths: readonly string[],
): Promise<CompileInput['mounts']> {
  const real = async (path: string): Promise<string | null> => realpath(path).catch(() => null);
  if (policy.filesystem.readOnlyMounts.length === 0) return { allowlist: [], realpaths: new Map(), protectedPaths: [] };
  const existing = async (paths: readonly string[]): Promise<string[]> =>
    (await Promise.all(paths.map(real))).filter((d): d is string => d !== null);
  const realpaths = new Map(
    await Promise.all(policy.filesystem.readOnlyMounts.map(async (m) => [m.hostPath, await real(m.hostPath)] as const)),
  );
  return { allowlist: await existing(allowlist), realpaths, protectedPaths: await existing(protectedHostPaths) };
}

/** How a requested secret is delivered: `env` defaults to the name when neither env nor file is given (the schema checked it is a variable name). */
function grantOf(r: SecretRequest): SecretGrant {
  return { name: r.name, env: r.env ?? (r.file === undefined ? r.name : null), file: r.file ?? null };
}
