/** Schemas of the volumes domain: persistent, size-limited volumes per tenant, and how a lease mounts them. */
import { z } from 'zod';
import { Volume, VolumeName } from '../../contract/volumes.js';

export { Volume, VolumeList, VolumeMount, VolumeName, VOLUME_MIN_BYTES } from '../../contract/volumes.js';

/** `POST /v1/volumes` body. */
export const CreateVolumeBody = z
  .object({
    name: VolumeName,
    /**
     * Capacity, bytes: the size of the volume's filesystem, which never grows past it (writers get
     * ENOSPC). From 16 MiB to `SBX_VOLUME_MAX_BYTES` (default 64 GiB), else `volume.size_out_of_range`.
     * The usable space is a little less: ext4 keeps its journal and inode tables inside it.
     */
    sizeBytes: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER),
    /**
     * Default false: one sandbox at a time may mount it read-write (readers are always allowed).
     * True: any number of sandboxes may mount it read-write at once; they share one local ext4
     * filesystem with its POSIX semantics, and nothing more (no locking across sandboxes).
     */
    shared: z.boolean().optional(),
  })
  .strict()
  .meta({
    examples: [
      { name: 'pip-cache', sizeBytes: 268_435_456 },
      { name: 'dataset', sizeBytes: 67_108_864, shared: true },
    ],
  });
export type CreateVolumeBody = z.infer<typeof CreateVolumeBody>;

/** `/v1/volumes/:name`: any name-like string is looked up (an unknown one is `404 volume.not_found`). */
export const VolumeParams = z.object({ name: z.string().regex(/^[A-Za-z0-9_.-]{1,100}$/, 'letters, digits, _ . and -; at most 100') });

/** What the store keeps: the view's fields, the tenant, and the id that names its disk on the host. */
export const VolumeRecord = Volume.omit({ mounts: true }).extend({
  /** `vol_` and 20 hex digits: the name of its disk on the host (never the tenant's name). */
  id: z.string().regex(/^vol_[0-9a-f]{20}$/),
  tenant: z.string(),
  /** keyId of the key that created it. */
  createdBy: z.string(),
});
export type VolumeRecord = z.infer<typeof VolumeRecord>;

/**
 * A path inside the sandbox: absolute and normalized (no `.`/`..` segments, no `//`, no trailing
 * `/`), printable ASCII without spaces, at most 255 characters.
 */
export const MountPath = z
  .string()
  .max(255)
  .regex(/^\/[\x21-\x7e]*$/, 'an absolute path: starts with /, printable ASCII without spaces')
  .refine(
    (p) =>
      p === '/' ||
      (!p.endsWith('/') &&
        p
          .split('/')
          .slice(1)
          .every((s) => s !== '' && s !== '.' && s !== '..')),
    {
      message: 'a normalized path: no empty, . or .. segments and no trailing /',
    },
  );

/** One volume a lease mounts (`volumes` of `POST /v1/sandboxes`). */
export const VolumeMountRequest = z
  .object({
    /** A volume of the lease's tenant. */
    name: VolumeName,
    /** Where it appears in the sandbox. */
    path: MountPath,
    /** Default false: read-write, which takes the volume's writer lock unless it is `shared`. */
    readOnly: z.boolean().optional(),
  })
  .strict();
export type VolumeMountRequest = z.infer<typeof VolumeMountRequest>;

/** The volumes of one lease: at most 16. */
export const VolumeMountRequests = z.array(VolumeMountRequest).max(16);

/** A lease's volume mount after every check: the volume, its disk's mount point on the host, and where it goes. */
export interface ResolvedVolumeMount {
  volumeId: string;
  name: string;
  shared: boolean;
  /** The host directory the volume's filesystem is mounted on (bind-mounted into the sandbox). */
  hostPath: string;
  containerPath: string;
  readOnly: boolean;
}
