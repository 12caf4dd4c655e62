/**
 * The policy schema (docs/DESIGN.md §6). Every policy file under `policies/` is parsed with it;
 * `policies/policy.schema.json` is generated from it, and `control-plane/policies/store.test.ts`
 * keeps the two in step.
 */
import { z } from 'zod';
import { SessionsPolicy, TerminalsPolicy, WatchPolicy } from './interactive.js';
import { PhaseSchema, phaseIssues } from './phases.js';
import { PortRule } from './ports.js';
import { ApprovalsSchema } from '../calls/approvals.js';
import { posix } from 'node:path';
import { digestOf } from '../../contract/digest.js';
import { Digest, Timestamp, type PolicyRef } from '../../contract/objects.js';
import { SecretName } from '../../contract/secrets.js';
import { EnvName } from '../../contract/tools.js';
import { EgressRuleSchema, InjectRuleSchema, injectIssues } from '../egress/schema.js';

const MiB = 1024 * 1024;
/** A Kubernetes label key (an optional DNS-subdomain prefix and `/`, a name of at most 63 characters), not the driver's own. */
const NodeLabelKey = z
  .string()
  .regex(/^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/, 'a Kubernetes label key')
  .refine((k) => k !== 'sbx.runtime', 'sbx.runtime is set by runtime.oci');

/**
 * An absolute path in normal form (`path.posix.normalize`): no `//`, `.` or `..` segments, no
 * trailing `/`. Checks of one path against another are then exact; Docker would otherwise take
 * `//run/sbx` for a mount apart from, and on top of, `/run/sbx`.
 */
const NormalPath = z
  .string()
  .regex(/^\/[^\0]*$/, 'must be an absolute path')
  .refine(
    (p) => posix.normalize(p) === p && (p === '/' || !p.endsWith('/')),
    'must be in normal form: no //, . or .. segments, no trailing /',
  );

/** A writable directory backed by a size-limited filesystem. */
export const WritableRoot = z
  .object({
    path: NormalPath,
    /** Size limit in bytes. */
    sizeBytes: z.number().int().min(MiB),
    /**
     * `volume`: a per-lease, size-limited (tmpfs-backed) Docker volume, labelled with the lease
     * and reaped with it; the files API reaches these roots. `tmpfs`: a container tmpfs for
     * scratch space (/tmp, the tool user's home).
     */
    kind: z.enum(['volume', 'tmpfs']).default('tmpfs'),
    /**
     * Whether the root starts with what the image has at `path` (copied in at create, owned by
     * the tool user; see control-plane/runtime/seed-roots.ts). Default true. False: it starts empty.
     */
    fromImage: z.boolean().default(true),
  })
  .strict();

/**
 * Paths no writable root, of a policy or of a lease, may be or lie under: the image's root,
 * the kernel's filesystems and sbx's own mounts (`/run`, which holds `/run/sbx` and `/run/secrets`;
 * `/opt/sbx`, the agent runtime mounted read-only from outside the image).
 */
export const RESERVED_ROOT_PATHS = ['/proc', '/sys', '/dev', '/run', '/opt/sbx'] as const;

/** True when `path` (absolute, normal form) is `/` or lies in one of RESERVED_ROOT_PATHS. */
export function isReservedRootPath(path: string): boolean {
  return path === '/' || RESERVED_ROOT_PATHS.some((r) => path === r || path.startsWith(`${r}/`));
}

/**
 * A path pattern of `filesystem.leaseWritableRoots`: an absolute path in normal form whose
 * segments are names or `*` (exactly one segment, any name): `/testbed`, `/home/*`.
 */
const RootPattern = z
  .string()
  .max(1024)
  .regex(/^(\/([^/\0*]+|\*))+$/, 'an absolute path of names or * segments, like /testbed or /home/*')
  .refine((p) => posix.normalize(p) === p, 'must be in normal form: no //, . or .. segments, no trailing /')
  .refine((p) => !isReservedRootPath(p.replace(/\/\*.*$/, '') || '/'), 'must not be or lie under /proc, /sys, /dev, /run or /opt/sbx');

/**
 * Writable roots a lease may add itself (`writableRoots` of `POST /v1/sandboxes`): a path
 * matching `path` (a pattern), at most `maxSizeBytes` large. They are `volume` roots (the files
 * API and the file tools reach them), seeded from the image like the policy's.
 */
export const LeaseWritableRootRule = z
  .object({
    path: RootPattern,
    /** Largest `sizeBytes` a lease may ask for at such a path, bytes. */
    maxSizeBytes: z.number().int().min(MiB),
  })
  .strict();
export type LeaseWritableRootRule = z.infer<typeof LeaseWritableRootRule>;

/** A read-only bind mount of a host path. */
export const ReadOnlyMount = z
  .object({
    hostPath: NormalPath,
    containerPath: NormalPath.refine(
      (p) => !['/', '/run', '/proc', '/sys', '/dev'].includes(p.replace(/\/+$/, '') || '/') && !/^\/(run\/sbx|proc|sys|dev)(\/|$)/.test(p),
      'must not cover /, /run, /run/sbx, /proc, /sys or /dev',
    ),
  })
  .strict();

/**
 * The shape of a policy without its cross-field rules: what a lease's stored policy snapshot
 * is read back with, so records written under older rules stay readable.
 */
export const PolicyShape = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/),
    version: z.number().int().positive(),
    description: z.string().default(''),
    filesystem: z
      .object({
        /** The image's root filesystem is mounted read-only. */
        readOnlyRoot: z.boolean().default(true),
        writableRoots: z.array(WritableRoot).default([]),
        /**
         * Path patterns where a lease may add writable roots of its own, each with a largest
         * size. Default: none (a lease asking for one is refused, `policy.writable_root_denied`).
         */
        leaseWritableRoots: z.array(LeaseWritableRootRule).max(32).default([]),
        /**
         * Host directories or files mounted read-only, e.g. a shared dataset or toolchain. Each
         * host path must resolve (symlinks followed) inside a directory of the control plane's
         * mount allowlist (`SBX_MOUNT_ALLOWLIST`), else leases are refused.
         */
        readOnlyMounts: z.array(ReadOnlyMount).max(32).default([]),
      })
      .strict(),
    network: z
      .object({
        /**
         * `none`: no interface but loopback. `allowlist`: still no interface, and the egress proxy
         * of the control plane (reached through the agent's 127.0.0.1 listener) lets through only
         * what `allow` lists. `open`: not offered by this control plane (refused as unenforceable).
         */
        mode: z.enum(['none', 'allowlist', 'open']),
        /** Allowlist rules (mode `allowlist` only); see control-plane/egress/rules.ts for the semantics. */
        allow: z.array(EgressRuleSchema).max(1000).default([]),
      })
      .strict(),
    /**
     * Port previews: which ports of servers listening inside the sandbox the control plane may
     * expose (`/v1/sandboxes/:id/ports/:port/*`, signed preview URLs). Default: none (closed).
     */
    ports: z
      .object({ allowed: z.array(PortRule).max(64).default([]) })
      .strict()
      .default({ allowed: [] }),
    secrets: z
      .object({
        /**
         * Names of the stored secrets a lease under this policy may ask for (`secrets` of
         * `POST /v1/sandboxes`); any other is `policy.secret_denied`. Empty: none.
         */
        allowed: z
          .array(SecretName)
          .refine((names) => new Set(names).size === names.length, 'names must be distinct')
          .default([]),
        /** Credentials the egress proxy puts into requests; the sandbox holds placeholders (egress/schema.ts `InjectRuleSchema`). Optional, so the digests of policies without it stay as they were. */
        inject: z.array(InjectRuleSchema).max(32).optional(),
      })
      .strict()
      .default({ allowed: [] }),
    /** Phases a lease moves through, forward only (phases.ts); optional, so other policies' digests stay as they were. */
    phases: z.array(PhaseSchema).min(1).max(16).optional(),
    resources: z
      .object({
        /** CPU count (fractions allowed), enforced as CFS quota. */
        cpus: z.number().positive().max(64),
        memoryBytes: z
          .number()
          .int()
          .min(64 * MiB),
        /** Max processes/threads in the container (pids cgroup). */
        pids: z.number().int().min(16),
        /** RLIMIT_NOFILE soft and hard. */
        openFiles: z.number().int().min(64),
        /** Default lease TTL when the request gives none, seconds. */
        ttlSeconds: z.number().int().positive(),
        /** Upper bound a request may ask for, seconds. */
        maxTtlSeconds: z.number().int().positive(),
        /**
         * How long a lease may stay paused over its whole life, seconds (all pauses added up); a
         * lease still paused when this runs out expires. The running TTL stops while paused, so
         * a lease lives at most `maxTtlSeconds` running plus this paused. 0: pausing is refused
         * (`policy.pause_denied`). Default 3600.
         */
        pausedTtlSeconds: z.number().int().min(0).default(3600),
      })
      .strict(),
    runtime: z
      .object({
        /** OCI runtime: `runc`, or `runsc` (gVisor) when registered with the Docker engine. */
        oci: z.enum(['runc', 'runsc']).default('runc'),
        /** Capabilities added back after dropping all; only what the agent needs to run tools as `toolUser`. */
        capabilities: z
          .array(z.enum(['SETUID', 'SETGID', 'KILL', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER']))
          .default(['SETUID', 'SETGID', 'KILL']),
        noNewPrivileges: z.boolean().default(true),
        /** `default`: Docker's default seccomp profile. Unconfined is not offered. */
        seccomp: z.literal('default').default('default'),
        /**
         * Who the tools run as (never root). Optional: without it the image's `User` is used
         * when not root, else `sandbox` (1000:1000); the manifest's `user.source` says which.
         */
        toolUser: z
          .object({ name: z.string(), uid: z.number().int().min(1), gid: z.number().int().min(1), home: z.string() })
          .strict()
          .optional(),
        /** Labels the node must carry: the Kubernetes driver's nodeSelector; the Docker driver refuses any (`policy.unenforceable`). */
        nodeLabels: z
          .record(NodeLabelKey, z.string().regex(/^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/, 'a Kubernetes label value'))
          .default({}),
      })
      .strict(),
    tools: z
      .object({
        exec: z
          .object({
            enabled: z.boolean().default(true),
            /** Default `timeoutMs` of an exec call. */
            defaultTimeoutMs: z.number().int().positive(),
            /** Largest `timeoutMs` a call may ask for. */
            maxTimeoutMs: z.number().int().positive(),
            /** Bytes kept per stream in events and the result; the rest is counted and hashed. */
            maxOutputBytes: z.number().int().positive(),
            /** Bytes of a cut stream kept whole as an artifact (the rest is still counted and hashed). */
            maxArtifactBytes: z
              .number()
              .int()
              .positive()
              .default(256 * MiB),
            /** Disk the agent's spool may use for all running calls together (background tasks included). */
            maxSpoolBytes: z
              .number()
              .int()
              .positive()
              .default(1024 * MiB),
          })
          .strict(),
        /** Which calls run at once, wait for an approver, or are refused (calls/approvals.ts); optional, so other policies' digests stay. */
        approvals: ApprovalsSchema.optional(),
        /** read_file, write_file, edit_file, list_files, glob, search, git_status, git_diff: within the writable roots. */
        files: z
          .object({
            enabled: z.boolean().default(true),
            /** Largest file a file tool reads or writes, bytes. */
            maxFileBytes: z
              .number()
              .int()
              .positive()
              .default(16 * MiB),
            defaultTimeoutMs: z.number().int().positive().default(60_000),
          })
          .strict()
          .default({ enabled: true, maxFileBytes: 16 * MiB, defaultTimeoutMs: 60_000 }),
      })
      .strict(),
    /** Env var names a lease request may set (empty = any POSIX name). */
    envAllowlist: z.array(EnvName).default([]),
    /** Shell sessions (`POST /v1/sandboxes/:id/sessions`): how many may run at once (over it: 429), and how long one may sit idle. */
    sessions: SessionsPolicy.default(SessionsPolicy.parse({})),
    /** File watch (`GET /v1/sandboxes/:id/files/watch`): SSE watches open at once on one sandbox; one more is 429. */
    watch: WatchPolicy.default(WatchPolicy.parse({})),
    /** Terminals (`POST /v1/sandboxes/:id/terminals`): how many at once, and when they end by themselves. */
    terminals: TerminalsPolicy.default(TerminalsPolicy.parse({})),
  })
  .strict();

/** One problem of a policy document: where (`resources.ttlSeconds`, `filesystem.writableRoots.0.path`) and what. */
export interface PolicyIssue {
  path: string;
  message: string;
}

const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const field = (v: unknown, key: string): unknown => (typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[key] : undefined);

/**
 * The rules that relate fields to each other. Written over `unknown` so they can also run on a
 * document whose shape has other faults: a PUT is then answered with every problem at once,
 * not the shape's first and the cross-field ones on the next try. A rule whose fields are
 * missing or mistyped is skipped (the shape reports those).
 */
export function crossFieldIssues(p: unknown): PolicyIssue[] {
  const issues: PolicyIssue[] = [];
  const resources = field(p, 'resources');
  const ttl = field(resources, 'ttlSeconds');
  const maxTtl = field(resources, 'maxTtlSeconds');
  if (isNumber(ttl) && isNumber(maxTtl) && ttl > maxTtl) issues.push({ path: 'resources.ttlSeconds', message: 'must be ≤ maxTtlSeconds' });
  const exec = field(field(p, 'tools'), 'exec');
  const defaultTimeout = field(exec, 'defaultTimeoutMs');
  const maxTimeout = field(exec, 'maxTimeoutMs');
  if (isNumber(defaultTimeout) && isNumber(maxTimeout) && defaultTimeout > maxTimeout) {
    issues.push({ path: 'tools.exec.defaultTimeoutMs', message: 'must be ≤ maxTimeoutMs' });
  }
  const roots = field(field(p, 'filesystem'), 'writableRoots');
  if (Array.isArray(roots)) {
    // Writable roots are tmpfs-backed: their pages are memory charged to the sandbox, so roots
    // larger than the memory limit would let a full disk OOM-kill the sandbox instead of ENOSPC.
    const sizes = roots.map((r) => field(r, 'sizeBytes'));
    const memory = field(resources, 'memoryBytes');
    if (sizes.every(isNumber) && isNumber(memory)) {
      const rootBytes = sizes.reduce((sum, n) => sum + n, 0);
      if (rootBytes > memory)
        issues.push({
          path: 'filesystem.writableRoots',
          message: `sizes add up to ${rootBytes} bytes, above resources.memoryBytes ${memory}`,
        });
    }
    const paths = roots.map((r) => field(r, 'path'));
    if (new Set(paths).size !== paths.length) issues.push({ path: 'filesystem.writableRoots', message: 'paths must be distinct' });
    const mounts = field(field(p, 'filesystem'), 'readOnlyMounts');
    if (Array.isArray(mounts) && paths.every((x): x is string => typeof x === 'string')) {
      mounts.forEach((m, i) => {
        const target = field(m, 'containerPath');
        const clash = typeof target === 'string' ? paths.find((root) => within(target, root) || within(root, target)) : undefined;
        if (clash) issues.push({ path: `filesystem.readOnlyMounts.${i}.containerPath`, message: `overlaps the writable root ${clash}` });
      });
    }
  }
  const network = field(p, 'network');
  issues.push(...injectIssues(field(field(p, 'secrets'), 'inject'), field(field(p, 'secrets'), 'allowed'), network), ...phaseIssues(p));
  const allow = field(network, 'allow');
  if (Array.isArray(allow) && allow.length > 0 && field(network, 'mode') !== 'allowlist') {
    issues.push({ path: 'network.allow', message: 'allow rules need network.mode "allowlist"' });
  }
  return issues;
}

/** True when `path` is `dir` or below it (both absolute, normalised). */
const within = (path: string, dir: string): boolean => path === dir.replace(/\/+$/, '') || path.startsWith(`${dir.replace(/\/+$/, '')}/`);

/** A policy as loaded from a file or a PUT: the shape plus its cross-field rules. */
export const Policy = PolicyShape.superRefine((p, ctx) => {
  for (const issue of crossFieldIssues(p)) ctx.addIssue({ code: 'custom', path: issue.path.split('.'), message: issue.message });
});
export type Policy = z.infer<typeof Policy>;

/**
 * Validates a policy document. Returns the parsed policy (defaults filled in), or every
 * problem found: the shape's and, even when the shape has faults, the cross-field rules'.
 */
export function validatePolicy(input: unknown): { ok: true; policy: Policy } | { ok: false; issues: PolicyIssue[] } {
  const shape = PolicyShape.safeParse(input);
  if (shape.success) {
    const issues = crossFieldIssues(shape.data);
    return issues.length === 0 ? { ok: true, policy: shape.data } : { ok: false, issues };
  }
  // An unknown field is reported at its own path, like every other problem.
  const shapeIssues = shape.error.issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((key) => ({ path: [...i.path.map(String), key].join('.'), message: 'unknown field' }))
      : [{ path: i.path.map(String).join('.'), message: i.message }],
  );
  // zod skips refinements of a faulty shape: run the cross-field rules on the raw input instead.
  return { ok: false, issues: [...shapeIssues, ...crossFieldIssues(input)] };
}

/** The reference a lease binds to: name, version and the digest of the policy's canonical JSON. */
export function policyRef(policy: Policy): PolicyRef {
  return { name: policy.name, version: policy.version, digest: digestOf(policy) };
}

/** One stored version of a policy, as `GET /v1/policies/...` returns it. */
export const PolicyVersion = z.object({
  name: z.string(),
  version: z.number().int().positive(),
  /** `sha256:` digest of the canonical JSON of `policy`: what a lease's `policy.digest` and manifest carry. */
  digest: Digest,
  createdAt: Timestamp,
  /** keyId of the admin key that PUT it, or `system` for a version imported from `policies/`. */
  createdBy: z.string(),
  /** Read back with the shape only, so versions stored under older cross-field rules stay readable. */
  policy: PolicyShape,
});
export type PolicyVersion = z.infer<typeof PolicyVersion>;

/** The state of a policy name: its latest version and whether it is deleted (tombstoned). */
export const PolicyHead = z.object({
  name: z.string(),
  latest: z.number().int().positive(),
  /** Digest of the latest version. */
  digest: Digest,
  deletedAt: Timestamp.nullable(),
  deletedBy: z.string().nullable(),
});
export type PolicyHead = z.infer<typeof PolicyHead>;
