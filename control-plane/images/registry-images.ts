/**
 * Images on a cluster (the Kubernetes driver): by registry reference only, never built or loaded
 * on an engine of this control plane. A lease's image is checked as on Docker — the reference's
 * grammar, and its registry on `SBX_IMAGE_REGISTRIES` — before the driver reads its config from
 * that registry; the default image (`SBX_IMAGE`, the operator's choice) is taken as set.
 */
import { AppError } from '../../contract/errors.js';
import { checkRegistry, parseImageRef } from './reference.js';
import type { ImageService } from './service.js';

/**
 * The resolver the lease planner uses on a cluster. Throws AppError `image.invalid_reference`,
 * `image.registry_not_allowed` (also for a reference without a registry: a cluster pulls by
 * full reference).
 */
export function registryImages(allowlist: readonly string[], defaultImage: string): Pick<ImageService, 'resolve'> {
  return {
    resolve: async (ref) => {
      if (ref !== defaultImage) {
        const parsed = parseImageRef(ref);
        if (parsed.registry === null)
          throw new AppError('image.registry_not_allowed', `image ${ref} names no registry: on a cluster, images run by full reference`, {
            details: { field: 'image', registry: 'docker.io', allowed: [...allowlist] },
          });
        checkRegistry(parsed, allowlist);
      }
      return { engineRef: ref, imageId: '', digest: null, pulled: false };
    },
  };
}
