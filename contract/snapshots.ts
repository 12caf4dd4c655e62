/**
 * The snapshot object of the wire contract (issue 12 part 5): what `POST /v1/sandboxes/:id/snapshots`
 * and `GET /v1/snapshots` answer, shared by the control plane and the SDK.
 */
import { z } from 'zod';
import { Digest, PolicyRef, Timestamp } from './objects.js';

/** A snapshot as the API shows it. */
export const Snapshot = z.object({
  id: z.string(),
  /** What its content is addressed by: the digest of its image's id (the changed files) and of each writable root's archive (SHA-256). */
  digest: Digest,
  /** Bytes the snapshot adds to the image its parent was leased from (its own layer and its roots' archives); counted against the tenant's snapshot quota. */
  sizeBytes: z.number().int().nonnegative(),
  /** The sandbox it was taken of. */
  parentLeaseId: z.string(),
  /** The parent's manifest digest at capture. */
  manifestDigest: Digest,
  /** The policy version the parent ran under; leases of the snapshot use it unless they name another. */
  policy: PolicyRef,
  /** The image the parent was leased from. */
  sourceImage: z.string(),
  /** The writable roots captured (their content starts every sandbox of the snapshot). */
  roots: z.array(z.object({ path: z.string(), sizeBytes: z.number().int(), source: z.enum(['policy', 'lease']) })),
  /**
   * Calls of the parent that were queued or running when the capture began: they were not waited
   * for, so their effects may be in the snapshot, partly or not at all.
   */
  inFlightCalls: z.array(z.string()),
  /**
   * False: the writable roots were archived one after another while the sandbox ran (only the
   * commit of its changed files was paused), so the snapshot is not one instant of the sandbox.
   */
  consistent: z.boolean(),
  tenant: z.string(),
  createdAt: Timestamp,
  expiresAt: Timestamp,
});
export type Snapshot = z.infer<typeof Snapshot>;
