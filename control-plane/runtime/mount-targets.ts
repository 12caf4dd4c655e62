/**
 * Mount targets must be real directories of the image, never symbolic links. The engine (runc)
 * resolves a mount target inside the container's root, following links: an image with
 * `/testbed -> /etc` and a writable root at `/testbed` would get a tool-user-writable volume
 * over `/etc`; a link to a missing path fails deep inside runc. Checked through the engine's
 * archive API on a never-started container of the image WITHOUT the sandbox's mounts (on the
 * sandbox's own container the engine mounts its volumes first, following the very links
 * checked, which hides them), which stats the last element of a path without following it,
 * so every prefix of every target is stat'ed. Costs one container create and remove per lease.
 */
import type Docker from 'dockerode';
import type { IncomingMessage } from 'node:http';
import { AppError } from '../../contract/errors.js';
import { statusOf } from './docker-errors.js';
import { LABEL, ownershipLabels, type Ownership } from './runtime.js';

/** Every path sbx mounts over in a sandbox of `spec`-like mounts: volumes, tmpfs, binds. */
export function mountTargetsOf(spec: {
  volumes: readonly { mountPath: string }[];
  tmpfs: Record<string, string>;
  readOnlyBinds: readonly { containerPath: string }[];
  volumeBinds?: readonly { containerPath: string }[] | undefined;
}): string[] {
  return [
    ...spec.volumes.map((v) => v.mountPath),
    ...Object.keys(spec.tmpfs),
    ...spec.readOnlyBinds.map((b) => b.containerPath),
    ...(spec.volumeBinds ?? []).map((b) => b.containerPath),
  ];
}

/**
 * Throws AppError `image.mount_path_symlink` (422; `details`: `path`, `linkTarget`, `mountPath`)
 * when the image has a symbolic link at any of `targets` or at a directory above one. A path
 * the image lacks is fine (the engine makes it).
 */
export async function refuseSymlinkedMountTargets(
  docker: Docker,
  spec: { leaseId: string; image: string; pinnedImage?: string; ownership: Ownership },
  targets: readonly string[],
): Promise<void> {
  const container = await docker.createContainer({
    name: `sbx-${spec.leaseId}-mounts`,
    Image: spec.pinnedImage ?? spec.image,
    // Never started: an entrypoint only because the engine refuses a container without a command.
    Entrypoint: ['/nonexistent/sbx-mount-check'],
    Cmd: [],
    Labels: { [LABEL.lease]: spec.leaseId, [LABEL.role]: 'seed', ...ownershipLabels(spec.ownership) },
    NetworkDisabled: true,
    HostConfig: { NetworkMode: 'none' },
  });
  try {
    await checkTargets(container, targets);
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
  }
}

async function checkTargets(container: Docker.Container, targets: readonly string[]): Promise<void> {
  const seen = new Set<string>();
  for (const target of targets) {
    const parts = target.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const path = `/${parts.slice(0, i).join('/')}`;
      if (seen.has(path)) continue;
      seen.add(path);
      const linkTarget = await linkTargetAt(container, path);
      if (linkTarget === null) continue;
      throw new AppError(
        'image.mount_path_symlink',
        `the image has a symbolic link at ${path} (to ${linkTarget}); sbx mounts over ${target} and does not follow links there`,
        { details: { path, linkTarget, mountPath: target } },
      );
    }
  }
}

/** The link target when `path` is a symbolic link in the container, else null (also when absent). */
async function linkTargetAt(container: Docker.Container, path: string): Promise<string | null> {
  let res: IncomingMessage;
  try {
    res = (await container.infoArchive({ path })) as unknown as IncomingMessage;
  } catch (err) {
    if (statusOf(err) === 404) return null;
    throw err;
  }
  res.resume();
  const header = res.headers['x-docker-container-path-stat'];
  if (typeof header !== 'string') return null;
  const stat = JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as { linkTarget?: string; mode?: number };
  const SYMLINK = 2 ** 27; // Go's os.ModeSymlink
  const isLink = (stat.linkTarget ?? '') !== '' || Math.floor((stat.mode ?? 0) / SYMLINK) % 2 === 1;
  return isLink ? stat.linkTarget || '?' : null;
}
