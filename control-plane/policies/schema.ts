/**
 * The policy schema (docs/DESIGN.md §6). Every policy file under `policies/` is parsed with it;
 * `policies/policy.schema.json` is generated from it, and `control-plane/policies/store.test.ts`
 * keeps the two in step.
 */
import { z } from 'zod';
import { SecretName } from '../../contract/secrets.js';
import { EnvName } from '../../contract/tools.js';

const MiB = 1024 * 1024;

/** A writable directory backed by a size-limited filesystem. */
export const WritableRoot = z
  .object({
    path: z.string().regex(/^\/[^\0]*$/, 'must be an absolute path'),
    /** Size limit in bytes. */
    sizeBytes: z.number().int().min(MiB),
    /**
     * `volume`: a per-lease, size-limited (tmpfs-backed) Docker volume, labelled with the lease
     * and reaped with it; the files API reaches these roots. `tmpfs`: a container tmpfs for
     * scratch space (/tmp, the tool user's home).
     */
    kind: z.enum(['volume', 'tmpfs']).default('tmpfs'),
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
      })
      .strict(),
    network: z
      .object({
        /** `none`: no interface but loopback. `allowlist` and `open` need the egress proxy (not built yet). */
        mode: z.enum(['none', 'allowlist', 'open']),
        allow: z.array(z.object({ host: z.string(), ports: z.array(z.number().int().min(1).max(65535)) }).strict()).default([]),
      })
      .strict(),
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
      })
      .strict()
      .default({ allowed: [] }),
    resources: z
      .object({
        /** CPU count (fractions allowed), enforced as CFS quota. */
        cpus: z.number().positive().max(64),
        memoryBytes: z.number().int().min(64 * MiB),
        /** Max processes/threads in the container (pids cgroup). */
        pids: z.number().int().min(16),
        /** RLIMIT_NOFILE soft and hard. */
        openFiles: z.number().int().min(64),
        /** Default lease TTL when the request gives none, seconds. */
        ttlSeconds: z.number().int().positive(),
        /** Upper bound a request may ask for, seconds. */
        maxTtlSeconds: z.number().int().positive(),
      })
      .strict(),
    runtime: z
      .object({
        /** OCI runtime: `runc`, or `runsc` (gVisor) when registered with the Docker engine. */
        oci: z.enum(['runc', 'runsc']).default('runc'),
        /** Capabilities added back after dropping all; only what the agent needs to run tools as `toolUser`. */
        capabilities: z.array(z.enum(['SETUID', 'SETGID', 'KILL', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER'])).default(['SETUID', 'SETGID', 'KILL']),
        noNewPrivileges: z.boolean().default(true),
        /** `default`: Docker's default seccomp profile. Unconfined is not offered. */
        seccomp: z.literal('default').default('default'),
        toolUser: z.object({ name: z.string(), uid: z.number().int().min(1), gid: z.number().int().min(1), home: z.string() }).strict(),
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
            maxArtifactBytes: z.number().int().positive().default(256 * MiB),
            /** Disk the agent's spool may use for all running calls together (background tasks included). */
            maxSpoolBytes: z.number().int().positive().default(1024 * MiB),
          })
          .strict(),
        /** read_file, write_file, edit_file, list_files, glob, search, git_status, git_diff: within the writable roots. */
        files: z
          .object({
            enabled: z.boolean().default(true),
            /** Largest file a file tool reads or writes, bytes. */
            maxFileBytes: z.number().int().positive().default(16 * MiB),
            defaultTimeoutMs: z.number().int().positive().default(60_000),
          })
          .strict()
          .default({ enabled: true, maxFileBytes: 16 * MiB, defaultTimeoutMs: 60_000 }),
      })
      .strict(),
    /** Env var names a lease request may set (empty = any POSIX name). */
    envAllowlist: z.array(EnvName).default([]),
  })
  .strict();

/** A policy as loaded from a file: the shape plus its cross-field rules. */
export const Policy = PolicyShape.superRefine((p, ctx) => {
  if (p.resources.ttlSeconds > p.resources.maxTtlSeconds) {
    ctx.addIssue({ code: 'custom', path: ['resources', 'ttlSeconds'], message: 'must be ≤ maxTtlSeconds' });
  }
  if (p.tools.exec.defaultTimeoutMs > p.tools.exec.maxTimeoutMs) {
    ctx.addIssue({ code: 'custom', path: ['tools', 'exec', 'defaultTimeoutMs'], message: 'must be ≤ maxTimeoutMs' });
  }
  // Writable roots are tmpfs-backed: their pages are memory charged to the sandbox, so roots
  // larger than the memory limit would let a full disk OOM-kill the sandbox instead of ENOSPC.
  const rootBytes = p.filesystem.writableRoots.reduce((sum, r) => sum + r.sizeBytes, 0);
  if (rootBytes > p.resources.memoryBytes) {
    ctx.addIssue({ code: 'custom', path: ['filesystem', 'writableRoots'], message: `sizes add up to ${rootBytes} bytes, above resources.memoryBytes ${p.resources.memoryBytes}` });
  }
  const paths = p.filesystem.writableRoots.map((r) => r.path);
  if (new Set(paths).size !== paths.length) {
    ctx.addIssue({ code: 'custom', path: ['filesystem', 'writableRoots'], message: 'paths must be distinct' });
  }
});
export type Policy = z.infer<typeof Policy>;
