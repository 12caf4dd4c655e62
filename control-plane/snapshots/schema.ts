/**
 * Snapshots (issue 12 part 5): a running sandbox's filesystem — its changed files and every
 * writable root — captured as an image, tenant-scoped, from which new sandboxes start
 * (`POST /v1/sandboxes {snapshot}`, `POST /v1/snapshots/:id/fork {count}`).
 */
import { z } from 'zod';
import type { PolicyRef } from '../../contract/objects.js';
import { Snapshot } from '../../contract/snapshots.js';

export { Snapshot };

export const SnapshotId = z.string().regex(/^snap_[a-f0-9]{20}$/, 'snap_ and 20 hex digits');

/** The record in Redis: the API view plus the image ref. */
export const SnapshotRecord = Snapshot.extend({
  /** `sbx-snapshot:<hex>`. */
  imageRef: z.string(),
});
export type SnapshotRecord = z.infer<typeof SnapshotRecord>;

/** What a lease started from a snapshot needs (`LeaseCreator`). */
export interface SnapshotSource {
  id: string;
  digest: string;
  parentLeaseId: string;
  imageRef: string;
  policy: PolicyRef;
  /** The parent's own writable roots (source `lease`), asked for again so its fork has them. */
  leaseRoots: Array<{ path: string; sizeBytes: number }>;
  /** Paths whose content the snapshot holds. */
  capturedRoots: string[];
}

export const SnapshotParams = z.object({ id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -; at most 128') });

/** `POST /v1/sandboxes/:id/snapshots`. */
export const CreateSnapshotBody = z
  .object({
    /** How long the snapshot is kept, seconds; default and maximum `SBX_SNAPSHOT_TTL_SECONDS`. */
    ttlSeconds: z.number().int().positive().optional(),
  })
  .strict()
  .meta({ examples: [{}, { ttlSeconds: 3600 }] });

/** `POST /v1/snapshots/:id/fork`. */
export const ForkBody = z
  .object({
    /** How many sandboxes to start (1 to `SBX_FORK_MAX`); more than the tenant's sandbox quota leaves is `429 quota.exceeded`. */
    count: z.number().int().min(1).max(1000),
    ttlSeconds: z.number().int().positive().optional(),
    labels: z.record(z.string(), z.string().max(256)).optional(),
  })
  .strict()
  .meta({ examples: [{ count: 3 }] });

/** Snapshot settings (`SBX_SNAPSHOT_TTL_SECONDS`, `SBX_SNAPSHOT_QUOTA_BYTES`, `SBX_FORK_MAX`). */
export interface SnapshotSettings {
  /** Default and largest retention of a snapshot, seconds. */
  ttlSeconds: number;
  /** Bytes of snapshots a tenant may keep (sum of `sizeBytes`). */
  quotaBytes: number;
  /** Largest `count` of a fork. */
  forkMax: number;
}
