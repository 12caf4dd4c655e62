/** Schemas of the API-key domain. */
import { z } from 'zod';
import { Timestamp } from '../../contract/objects.js';

/** A tenant name: lower-case letters, digits and `-`, 1–63 characters (like a DNS label). */
export const TenantName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lower-case letters, digits and -; 1 to 63, starting with a letter or digit');

/** `POST /v1/api-keys` body. */
export const CreateApiKeyBody = z
  .object({
    /** What the key is for, for people reading the list (`ci-bot`, `alice laptop`). */
    name: z.string().min(1).max(100),
    role: z.enum(['admin', 'approver', 'user']),
    tenant: TenantName,
  })
  .strict()
  .meta({ examples: [{ name: 'ci-bot', role: 'user', tenant: 'ci' }] });
export type CreateApiKeyBody = z.infer<typeof CreateApiKeyBody>;

export const ApiKeyId = z.string().regex(/^key_[0-9a-f]{20}$/, 'key_ and 20 hex digits');

export const ApiKeyParams = z.object({ id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -; at most 128') });

/** An API key's metadata, as listed. The secret is never stored; only its sha256 is (and never shown). */
export const ApiKey = z.object({
  id: ApiKeyId,
  name: z.string(),
  role: z.enum(['admin', 'approver', 'user']),
  tenant: TenantName,
  createdAt: Timestamp,
  /** keyId of the admin key that created it. */
  createdBy: z.string(),
  revokedAt: Timestamp.nullable(),
  revokedBy: z.string().nullable(),
});
export type ApiKey = z.infer<typeof ApiKey>;

/** What the store keeps: the metadata and the hex sha256 of the secret (to unindex it on revoke). */
export const ApiKeyRecord = ApiKey.extend({ sha256: z.string().regex(/^[0-9a-f]{64}$/) });
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;
