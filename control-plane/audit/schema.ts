/** Schemas of the audit domain: the entry as stored and returned, and the query of `GET /v1/audit`. */
import { z } from 'zod';
import { Digest, Timestamp } from '../../contract/objects.js';

/** Who made a change: an API key (its id, role and tenant at the time), or sbx itself (`system`: seeding, expiry, reconcile). */
export const AuditActor = z.union([
  z.object({ keyId: z.string(), role: z.enum(['admin', 'approver', 'user']), tenant: z.string() }).strict(),
  z.literal('system'),
]);
export type AuditActor = z.infer<typeof AuditActor>;

/**
 * `domain.verb`. Recorded today: `api_key.create`, `api_key.revoke`, `policy.seed`, `policy.put`,
 * `policy.delete`, `lease.create`, `lease.renew`, `lease.release`, `lease.expire`, `lease.lost`, `lease.reap`. Other domains add their own
 * (e.g. `secret.put`) without changing this schema.
 */
export const AuditAction = z.string().regex(/^[a-z_]+\.[a-z_]+$/, 'domain.verb, lower case');

/** What an audited change is about, as `kind:id`: `policy:default`, `api_key:key_…`, `lease:sbx_…`. */
export const AuditTarget = z.string().regex(/^[a-z_]+:[A-Za-z0-9_.-]{1,128}$/, 'kind:id');

/** An entry as a domain hands it to `AuditLog.record` (the log assigns `id` and `at`). */
export const AuditInput = z
  .object({
    actor: AuditActor,
    action: AuditAction,
    target: AuditTarget,
    /** Digest of the target before the change; null when it did not exist (or was deleted). */
    beforeDigest: Digest.nullable(),
    /** Digest of the target after the change; null when it no longer exists. */
    afterDigest: Digest.nullable(),
    /** Facts of the change worth keeping (a version, a reason); never secrets. */
    details: z.record(z.string(), z.unknown()).default({}),
  })
  .strict();
export type AuditInput = z.input<typeof AuditInput>;

/** One entry of the audit log. `id` is its Redis stream id (`<ms>-<n>`), increasing with time. */
export const AuditEntry = AuditInput.extend({ id: z.string(), at: Timestamp });
export type AuditEntry = z.infer<typeof AuditEntry>;

/** Stream id of an entry: the `cursor` of the next page. */
export const AuditCursor = z
  .string()
  .regex(/^\d{1,20}-\d{1,20}$/, 'an entry id, as nextCursor gave it')
  // Stream ids are two unsigned 64-bit numbers (Redis streams intro): larger ones make Redis fail.
  // zod runs refinements after a failed regex too, so the refinement checks the form itself.
  .refine(
    (c) => !/^\d{1,20}-\d{1,20}$/.test(c) || c.split('-').every((part) => BigInt(part) <= 0xffff_ffff_ffff_ffffn),
    'an entry id, as nextCursor gave it',
  );

/** `GET /v1/audit` query: filters are exact matches; `cursor` is the `nextCursor` of the previous page. */
export const AuditQuery = z
  .object({
    action: AuditAction.optional(),
    target: AuditTarget.optional(),
    /** Entries per page, 1–500. Default 100. */
    limit: z.coerce.number().int().min(1).max(500).default(100),
    cursor: AuditCursor.optional(),
  })
  .strict();
export type AuditQuery = z.infer<typeof AuditQuery>;
