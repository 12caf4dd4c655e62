/** Schemas of the quotas domain: per-tenant limits on what its leases hold at once. */
import { z } from 'zod';
import { TenantName } from '../api-keys/schema.js';

/**
 * Limits of one tenant, as `PUT /v1/tenants/:tenant/quota` takes them and the default
 * (`SBX_DEFAULT_TENANT_QUOTA`) gives them. Each field: a number, `null` (no limit), or left out
 * (the default's value; in the default itself, no limit). What counts is the leases not yet
 * ended (creating, ready, releasing), each with its policy's `resources`.
 */
export const QuotaLimits = z
  .object({
    /** Sandboxes at once. */
    maxSandboxes: z.number().int().min(0).max(1_000_000).nullable().optional(),
    /** CPUs (the policies' `resources.cpus`) summed over the sandboxes; counted in thousandths. */
    maxCpus: z.number().min(0).max(1_000_000).nullable().optional(),
    /** Memory (the policies' `resources.memoryBytes`) summed over the sandboxes, bytes. */
    maxMemoryBytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
    /** Persistent volumes (`POST /v1/volumes`): their `sizeBytes` summed over the tenant's volumes, bytes. */
    maxVolumeBytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
  })
  .strict()
  .meta({ examples: [{ maxSandboxes: 10, maxCpus: 8, maxMemoryBytes: 17_179_869_184 }, { maxSandboxes: null }, {}] });
export type QuotaLimits = z.infer<typeof QuotaLimits>;

/** Limits in force for a tenant: a number, or null for no limit. */
export interface EffectiveLimits {
  maxSandboxes: number | null;
  maxCpus: number | null;
  maxMemoryBytes: number | null;
  maxVolumeBytes: number | null;
}

/** What a tenant's live leases hold now. */
export interface QuotaUsage {
  sandboxes: number;
  cpus: number;
  memoryBytes: number;
}

/** `GET`/`PUT /v1/tenants/:tenant/quota` answer. */
export interface TenantQuota {
  tenant: string;
  /** The limits in force: the configured ones over the default, field by field. */
  limits: EffectiveLimits;
  /** What an admin PUT for this tenant (null: never, the default applies whole). */
  configured: QuotaLimits | null;
  usage: QuotaUsage;
}

/** What one lease asks of its tenant's quota: one sandbox with its policy's resources. */
export interface QuotaRequest {
  cpus: number;
  memoryBytes: number;
}

export const TenantParams = z.object({ tenant: TenantName });
