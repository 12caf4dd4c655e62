/**
 * Persistent volumes on the wire: what `POST /v1/volumes` answers and `GET /v1/volumes` lists.
 * The control plane (control-plane/volumes/) and the SDK parse with the same schemas.
 */
import { z } from 'zod';
import { Timestamp } from './objects.js';

/**
 * A volume name: lower-case letters, digits, `_`, `.` and `-`; 1–63 characters, starting with a
 * letter or digit. Names are per tenant: two tenants may each have a volume `cache`, and neither
 * ever sees the other's.
 */
export const VolumeName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_.-]{0,62}$/, 'lower-case letters, digits, _ . and -; 1 to 63, starting with a letter or digit');

/** The smallest volume, bytes (16 MiB): an ext4 filesystem with its journal needs room of its own. */
export const VOLUME_MIN_BYTES = 16 * 1024 * 1024;

/** A sandbox that has the volume mounted now. */
export const VolumeMount = z.object({ leaseId: z.string(), readOnly: z.boolean() });
export type VolumeMount = z.infer<typeof VolumeMount>;

/** A volume as the API shows it. */
export const Volume = z.object({
  name: VolumeName,
  /** Capacity, bytes: the size of its filesystem (a little of it is ext4's own: journal, inode tables). */
  sizeBytes: z.number().int(),
  /** Whether several sandboxes may mount it read-write at once. */
  shared: z.boolean(),
  /** `creating` while its disk is made, `ready`, `deleting` while it is removed. */
  state: z.enum(['creating', 'ready', 'deleting']),
  createdAt: Timestamp,
  /** Live sandboxes that have it mounted (only in `GET /v1/volumes/:name`). */
  mounts: z.array(VolumeMount).optional(),
});
export type Volume = z.infer<typeof Volume>;

/** `GET /v1/volumes` answer: the tenant's volumes, the bytes they take (sizes summed) and the tenant's limit (`maxVolumeBytes`; null: none). */
export const VolumeList = z.object({ volumes: z.array(Volume), usedBytes: z.number().int(), limitBytes: z.number().int().nullable() });
export type VolumeList = z.infer<typeof VolumeList>;
