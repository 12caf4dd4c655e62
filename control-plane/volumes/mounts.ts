/**
 * Where a lease may mount its volumes: pure checks on the requested paths against what the
 * kernel, sbx and the policy already put in the sandbox. Unit-tested in `mounts.test.ts`.
 */
import { AppError } from '../../contract/errors.js';
import type { VolumeMountRequest } from './schema.js';

/**
 * Paths no volume may be mounted on or under: the kernel's (`/proc`, `/sys`, `/dev`), sbx's own
 * (`/run/sbx`: agent credentials, Redis and egress sockets, spool; `/run/secrets`: file secrets;
 * `/opt/sbx`: the agent's runtime mounted from outside the image).
 * `/` itself is refused too (a volume over the root would hide the image).
 */
export const RESERVED_MOUNT_PATHS = ['/proc', '/sys', '/dev', '/run/sbx', '/run/secrets', '/opt/sbx'] as const;

/** Whether `inner` is `outer` or lies under it (both normalized absolute paths). */
export function within(inner: string, outer: string): boolean {
  return inner === outer || outer === '/' || inner.startsWith(`${outer}/`);
}

/**
 * Checks a lease's volume mounts. `taken` are the paths the policy already mounts (writable
 * roots, read-only mounts). Throws `volume.mounted_twice` (a name twice),
 * `volume.mount_path_reserved` (`/`, or on or under a reserved path), `volume.mount_path_conflict`
 * (on, over or under a path of `taken`, or of another volume of the lease); `details.field` is
 * `volumes.<i>.name` or `volumes.<i>.path`.
 */
export function checkMountPaths(requests: readonly VolumeMountRequest[], taken: readonly string[]): void {
  const names = new Map<string, number>();
  requests.forEach((r, i) => {
    const earlier = names.get(r.name);
    if (earlier !== undefined)
      throw new AppError('volume.mounted_twice', `volume ${r.name} is mounted twice (volumes.${earlier} and volumes.${i})`, {
        details: { name: r.name, field: `volumes.${i}.name` },
      });
    names.set(r.name, i);
  });
  requests.forEach((r, i) => {
    const field = `volumes.${i}.path`;
    const reserved = r.path === '/' ? '/' : RESERVED_MOUNT_PATHS.find((p) => within(r.path, p) || within(p, r.path));
    if (reserved !== undefined)
      throw new AppError('volume.mount_path_reserved', `a volume cannot be mounted at ${r.path}: ${reserved} belongs to the sandbox`, {
        details: { path: r.path, reserved, field },
      });
    const others = [...taken, ...requests.filter((_, j) => j !== i).map((o) => o.path)];
    const clash = others.find((p) => within(r.path, p) || within(p, r.path));
    if (clash !== undefined)
      throw new AppError('volume.mount_path_conflict', `a volume at ${r.path} would be on, over or under ${clash}, already mounted there`, {
        details: { path: r.path, conflictsWith: clash, field },
      });
  });
}
