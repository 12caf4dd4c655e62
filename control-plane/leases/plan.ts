/**
 * The lease plan: everything a lease needs decided before anything is made — the policy
 * version, TTL, env, secret grants and values, image, and the compiled container spec. Every
 * check of a create happens here, so a refused create leaves nothing behind.
 */
import { realpath } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { PolicyRef, WritableRootEntry } from '../../contract/objects.js';
import type { SecretGrant } from '../../contract/queue.js';
import { compileSandboxSpec, type CompileInput } from '../policies/compiler.js';
import type { Policy } from '../policies/schema.js';
import type { PolicyService } from '../policies/service.js';
import { SNAPSHOT_ROOTS_PREFIX, type Ownership, type SandboxRuntime, type SandboxSpec } from '../runtime/runtime.js';
import type { SnapshotSource } from '../snapshots/schema.js';
import type { SecretService } from '../secrets/service.js';
import type { CreateSandboxBody, SecretRequest } from './schema.js';
import { withLeaseRoots } from './writable-roots.js';

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
  /** Secret values in clear, zeroed when the create ends. */
  values: Map<string, Buffer>;
  image: string;
  imageId: string;
  engineVersion: string;
  spec: SandboxSpec;
}

/** Host directories of a lease under the data dir: its agent credentials file (until the agent read it) and its egress proxy socket. */
export function leaseDirs(dataDir: string, id: string): { credentials: string; egress: string } {
  return { credentials: join(dataDir, 'leases', id), egress: join(dataDir, 'egress', id) };
}

export interface PlannerDeps {
  runtime: Pick<SandboxRuntime, 'info' | 'imageId'>;
  policies: Pick<PolicyService, 'resolve'>;
  /** Values of the secrets a lease is granted, for its agent only. */
  secrets: Pick<SecretService, 'reveal'>;
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
  /** Host path of the Redis unix socket agents connect to. */
  agentRedisSocket: string;
  /** Host directories read-only mounts may come from (`SBX_MOUNT_ALLOWLIST`). */
  mountAllowlist: readonly string[];
  /** Host paths no read-only mount may contain: the data dir, the Docker and Redis sockets. */
  protectedHostPaths: readonly string[];
}

export class LeasePlanner {
  constructor(
    private readonly deps: PlannerDeps,
    private readonly options: PlannerOptions,
  ) {}

  /**
   * Plans lease `id` from `body` (with `from`: a snapshot, whose captured roots seed the lease's;
   * the caller put its image, policy and roots into `body`). Throws `policy.not_found`, `policy.unenforceable`,
   * `lease.ttl_exceeds_policy`, `input.invalid` (env names the policy does not allow),
   * `policy.secret_denied`, `secret.not_found`, `secret.unreadable`,
   * `policy.mount_not_allowed`, `runtime.image_not_found`, `runtime.unavailable`, and for
   * `writableRoots` what `withLeaseRoots` throws (`lease.writable_root_invalid`,
   * `policy.writable_root_denied`, `lease.writable_root_too_large`).
   */
  async plan(id: string, body: CreateSandboxBody, from?: SnapshotSource): Promise<LeasePlan> {
    const { runtime, policies } = this.deps;
    const policyName = typeof body.policy === 'string' ? body.policy : (body.policy?.name ?? 'default');
    const policyVersion = typeof body.policy === 'object' ? body.policy.version : undefined;
    // The version and its snapshot are fixed here: a later PUT or DELETE of the policy never reaches this lease.
    const resolved = await policies.resolve(policyName, policyVersion);
    const ref = resolved.ref;
    const { policy, roots } = withLeaseRoots(resolved.policy, body.writableRoots ?? []);
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
    const denied = grants.find((g) => !policy.secrets.allowed.includes(g.name));
    if (denied) {
      throw new AppError('policy.secret_denied', `policy ${ref.name} does not allow secret ${denied.name}`, {
        details: { name: denied.name, policy: ref.name, field: 'secrets' },
      });
    }
    const values = await this.deps.secrets.reveal(grants.map((g) => g.name));
    const image = body.image ?? this.options.defaultImage;
    const [info, imageId] = await Promise.all([runtime.info(), runtime.imageId(image)]);
    const dirs = leaseDirs(this.options.dataDir, id);
    const spec = compileSandboxSpec({
      leaseId: id,
      ownership: this.options.ownership,
      sbxVersion: this.options.sbxVersion,
      image,
      policy,
      policyRef: ref,
      agentConfigHostDir: dirs.credentials,
      agentRedisSocketDir: dirname(this.options.agentRedisSocket),
      egressSocketHostDir: dirs.egress,
      mounts: await resolveMounts(policy, this.options.mountAllowlist, this.options.protectedHostPaths),
      ociRuntimes: info.ociRuntimes,
      labels: body.labels ?? {},
      ...(from ? { seedFrom: { prefix: SNAPSHOT_ROOTS_PREFIX, paths: from.capturedRoots } } : {}),
    });
    return { policy, roots, ref, ttlSeconds, env, grants, values, image, imageId, engineVersion: info.engineVersion, spec };
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
