/** HTTP schemas of the leases domain. */
import { z } from 'zod';
import { LeaseStatus, type Lease } from '../../contract/objects.js';
import { SecretFilePath, SecretName } from '../../contract/secrets.js';
import { EnvMap, EnvName } from '../../contract/tools.js';
import { VolumeMountRequests } from '../volumes/schema.js';

const LabelKey = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.\/-]{0,62}$/, 'label keys: letters, digits, _ . / -');

/**
 * A secret the lease asks for: its stored name, and how the calls that ask for it receive it —
 * `env` (a variable of their process) and/or `file` (in /run/secrets). Without either, `env`
 * is the name itself, which must then be a POSIX variable name.
 */
export const SecretRequest = z
  .object({ name: SecretName, env: EnvName.optional(), file: SecretFilePath.optional() })
  .strict()
  .refine((r) => r.env !== undefined || r.file !== undefined || EnvName.safeParse(r.name).success, {
    message: 'the name is not a POSIX variable name: give env (a variable name) or file',
    path: ['env'],
  });
export type SecretRequest = z.infer<typeof SecretRequest>;

/** Secrets of one lease: distinct names, and no two delivered to the same variable or file. */
const SecretRequests = z
  .array(SecretRequest)
  .max(64)
  .superRefine((requests, ctx) => {
    const seen = { name: new Set<string>(), env: new Set<string>(), file: new Set<string>() };
    requests.forEach((r, i) => {
      const env = r.env ?? (r.file === undefined ? r.name : undefined);
      for (const [field, value] of [
        ['name', r.name],
        ['env', env],
        ['file', r.file],
      ] as const) {
        if (value === undefined) continue;
        if (seen[field].has(value)) ctx.addIssue({ code: 'custom', path: [i, field], message: `${field} ${value} is given twice` });
        seen[field].add(value);
      }
    });
  });

/** The fields a create with `count` may have (what a fork takes). */
const FORK_FIELDS = new Set(['snapshot', 'count', 'ttlSeconds', 'labels']);

export const CreateSandboxBody = z
  .object({
    /** Image reference; default the sandbox image built from images/. */
    image: z.string().min(1).max(256).optional(),
    /**
     * A snapshot of the tenant's (`snap_…`) to start from: its image, policy version (unless
     * `policy` names one) and writable roots with their captured content. Not with `image`.
     */
    snapshot: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,128}$/)
      .optional(),
    /**
     * With `snapshot` only: start `count` independent sandboxes from it (1 to `SBX_FORK_MAX`), all
     * or none, answered `201 {sandboxes}` like `POST /v1/snapshots/:id/fork`. Over `SBX_FORK_MAX`
     * is `400 input.invalid`; more than the tenant's sandbox quota leaves, `429 quota.exceeded`
     * before anything starts. With an Idempotency-Key, copy i is created under the key
     * `<key>#<i>/<count>`: the same request again answers the same sandboxes (`200`); a failed
     * one releases the copies it started and frees their keys.
     */
    count: z.number().int().min(1).max(1000).optional(),
    /** Policy name (latest version) or `{name, version}`. Default `default`. */
    policy: z
      .union([z.string().min(1), z.object({ name: z.string().min(1), version: z.number().int().positive().optional() }).strict()])
      .optional(),
    /** Lease lifetime, seconds; default and maximum come from the policy. */
    ttlSeconds: z.number().int().positive().optional(),
    /** Environment every call in the sandbox gets. */
    env: EnvMap.optional(),
    /** Stored secrets the lease may hand to its calls; each must be allowed by the policy (`policy.secret_denied`). */
    secrets: SecretRequests.optional(),
    /**
     * Persistent volumes of the tenant to mount (`POST /v1/volumes`): `{name, path, readOnly?}`,
     * each checked before anything is created (docs/errors.md `volume.*`).
     */
    volumes: VolumeMountRequests.optional(),
    /**
     * Writable roots of the lease's own, within the policy's `filesystem.leaseWritableRoots`
     * (e.g. `/testbed`): each starts with the image's content at its path, owned by the tool
     * user; `sizeBytes` default: the policy's largest, within the memory its roots leave.
     * Refused: `lease.writable_root_invalid`, `policy.writable_root_denied`, `lease.writable_root_too_large`.
     */
    writableRoots: z
      .array(
        z
          .object({
            path: z.string().min(1).max(1024),
            sizeBytes: z
              .number()
              .int()
              .min(1024 * 1024)
              .optional(),
          })
          .strict(),
      )
      .max(16)
      .optional(),
    /** Free-form labels, returned as given; `sbx.*` keys are reserved. */
    labels: z
      .record(LabelKey, z.string().max(256))
      .refine((l) => Object.keys(l).every((k) => !k.startsWith('sbx.')), 'label keys starting with "sbx." are reserved')
      .optional(),
  })
  .strict()
  .refine((b) => b.snapshot === undefined || b.image === undefined, { message: 'give image or snapshot, not both', path: ['snapshot'] })
  .refine((b) => b.count === undefined || b.snapshot !== undefined, {
    message: 'count is only for a start from a snapshot',
    path: ['count'],
  })
  .refine((b) => b.count === undefined || Object.keys(b).every((k) => FORK_FIELDS.has(k)), {
    message: 'with count, only snapshot, ttlSeconds and labels may be given',
    path: ['count'],
  })
  .meta({
    examples: [
      {},
      { policy: 'default', ttlSeconds: 600, env: { CI: 'true' }, labels: { team: 'ci', job: '42' } },
      { writableRoots: [{ path: '/testbed', sizeBytes: 268435456 }] },
      { snapshot: 'snap_0123456789abcdef0123', count: 3 },
      {
        policy: { name: 'offline-ci', version: 1 },
        secrets: [{ name: 'NPM_TOKEN' }, { name: 'GITHUB_TOKEN', env: 'GH_TOKEN', file: '/run/secrets/github' }],
      },
      {
        volumes: [
          { name: 'pip-cache', path: '/cache' },
          { name: 'dataset', path: '/data', readOnly: true },
        ],
      },
    ],
  });
export type CreateSandboxBody = z.infer<typeof CreateSandboxBody>;

/** `POST /v1/sandboxes/:id/renew`: the lease's new remaining life, from now. */
export const RenewSandboxBody = z
  .object({
    /** Seconds from now until the new `expiresAt`; the whole life stays within the policy's `maxTtlSeconds`. */
    ttlSeconds: z.number().int().positive(),
  })
  .strict();
export type RenewSandboxBody = z.infer<typeof RenewSandboxBody>;

/** `POST /v1/sandboxes/:id/phase`: the phase of the sandbox's policy to move to (forward only). */
export const MovePhaseBody = z.object({ name: z.string().min(1).max(64) }).strict();

/** `POST /v1/sandboxes/:id/policy`: the version of the sandbox's policy to move to while it runs (admin). */
export const ChangePolicyBody = z.object({ version: z.number().int().positive() }).strict();

/**
 * `POST /v1/sandboxes/:id/checkpoints`: a checkpoint of the running sandbox's memory and
 * processes. `includeMemory` must be true (a filesystem snapshot is `POST
 * /v1/sandboxes/:id/snapshots`); where the engine cannot checkpoint memory the answer is
 * `422 policy.unenforceable`, never a snapshot without it.
 */
export const CheckpointBody = z
  .object({
    includeMemory: z.literal(true, { error: 'includeMemory must be true: a filesystem snapshot is POST /v1/sandboxes/:id/snapshots' }),
  })
  .strict()
  .meta({ examples: [{ includeMemory: true }] });

/** `DELETE /v1/sandboxes/:id` query. */
export const ReleaseQuery = z
  .object({
    /** How long running calls may go on before they are cancelled, ms (0–600 000). Default 0: cancel at once. */
    graceMs: z.coerce.number().int().min(0).max(600_000).default(0),
  })
  .strict();

export const IdempotencyKey = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

/**
 * `POST /v1/sandboxes` headers: `Idempotency-Key` makes a retried create return the same
 * sandbox (per tenant). Loose: the other headers pass through unchecked.
 */
export const CreateSandboxHeaders = z.object({ 'idempotency-key': IdempotencyKey.optional() }).loose();

/** Any id is looked up (an unknown one is `404 lease.not_found`); only characters no id has are refused. */
export const LeaseParams = z.object({ id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -; at most 128') });

/** A query parameter given once (a string) or repeated (an array), as a list. */
const Repeatable = <T extends z.ZodType>(item: T) =>
  z.union([item, z.array(item)]).transform((v) => (Array.isArray(v) ? v : [v]) as Array<z.infer<T>>);

/** `key=value`: the key a label key, the value what follows the first `=` (may be empty). */
const LabelSelector = z
  .string()
  .regex(/^[^=]+=/, 'key=value')
  .transform((s) => ({ key: s.slice(0, s.indexOf('=')), value: s.slice(s.indexOf('=') + 1) }))
  .pipe(z.object({ key: LabelKey, value: z.string().max(256) }));

/**
 * `GET /v1/sandboxes` query: `label=key=value` (repeatable: every one must match), `status=`
 * (repeatable: any may match).
 */
export const ListSandboxesQuery = z
  .object({
    label: Repeatable(LabelSelector).optional(),
    status: Repeatable(LeaseStatus).optional(),
  })
  .strict();
export type ListSandboxesQuery = z.infer<typeof ListSandboxesQuery>;

/** Whether `lease` passes the list filter: it carries every label asked for, and has one of the statuses asked for. */
export function matchesListQuery(lease: Lease, query: ListSandboxesQuery): boolean {
  const labels = query.label ?? [];
  const statuses = query.status ?? [];
  return (
    labels.every(({ key, value }) => Object.hasOwn(lease.labels, key) && lease.labels[key] === value) &&
    (statuses.length === 0 || statuses.includes(lease.status))
  );
}
