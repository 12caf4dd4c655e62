/**
 * Mount targets must be real directories of the image, never symbolic links. The engine (runc)
 * resolves a mount target inside the container's root, following links: an image with
 * `/testbed -> /etc` and a writable root at `/testbed` would get a tool-user-writable volume
 * over `/etc`; a link to a missing path fails deep inside runc. Checked through the engine's
 * archive API on a never-started container of the image WITHOUT the sandbox's mounts (on the
 * sandbox's own container the engine mounts its volumes first, following the very links
 * checked, which hides them), which stats the last element of a path without following it,
 * so every prefix of every target is stat'ed. What was found is recorded per image ID
 * (image-survey.ts): only an image's first lease makes that container and reads.
 */
import type Docker from 'dockerode';
import type { IncomingMessage } from 'node:http';
import { AppError } from '../../contract/errors.js';
import { statusOf } from './docker-errors.js';
import type { ImageSource } from './image-source.js';
import type { ImageRecord, ImageSurvey } from './image-survey.js';

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
 * the image lacks is fine (the engine makes it). Paths `recorded` for the image are not read
 * again; the others are read through `source` (one lease of the image at a time) and recorded
 * in `survey`.
 */
export async function refuseSymlinkedMountTargets(
  source: ImageSource,
  { survey, recorded }: { survey: ImageSurvey; recorded: ImageRecord | null },
  targets: readonly string[],
): Promise<void> {
  const paths = linkPathsOf(targets);
  const imageId = source.imageId;
  let links = recorded?.links(paths) ?? new Map<string, string | null>();
  if (imageId === null) links = await readLinks(source, paths);
  else if (!settles(links, paths))
    links = await survey.once(imageId, 'links', async () => {
      // Read again: a lease that held this read before may have recorded what was missing.
      const known = (await survey.record(imageId)).links(paths);
      if (settles(known, paths)) return known;
      const found = await readLinks(
        source,
        paths.filter((p) => !known.has(p)),
      );
      await survey.recordLinks(imageId, found);
      return new Map([...known, ...found]);
    });
  for (const path of paths) {
    const linkTarget = links.get(path) ?? null;
    if (linkTarget === null) continue;
    const mountPath = targets.find((t) => prefixesOf(t).includes(path)) ?? path;
    throw new AppError(
      'image.mount_path_symlink',
      `the image has a symbolic link at ${path} (to ${linkTarget}); sbx mounts over ${mountPath} and does not follow links there`,
      { details: { path, linkTarget, mountPath } },
    );
  }
}

/** Whether `known` decides the check of `paths`: every one known, or a link among them (which refuses, whatever the rest hold). */
function settles(known: ReadonlyMap<string, string | null>, paths: readonly string[]): boolean {
  return known.size === paths.length || [...known.values()].some((target) => target !== null);
}

/** Every path checked for `targets`: each target and each directory above it, once. */
function linkPathsOf(targets: readonly string[]): string[] {
  return [...new Set(targets.flatMap(prefixesOf))];
}

/**
 * The link target (or null) of `paths` in the image, read through `source` in order up to the
 * first link (what lies past it is refused anyway). Throws `lease.create_failed` when the
 * source container vanished meanwhile: its 404s read as "no link", and are not trusted.
 */
async function readLinks(source: ImageSource, paths: readonly string[]): Promise<Map<string, string | null>> {
  const found = new Map<string, string | null>();
  for (const path of paths) {
    const linkTarget = await linkTargetAt(await source.get(), path);
    found.set(path, linkTarget);
    if (linkTarget !== null) break;
  }
  if (found.size > 0) await source.confirm();
  return found;
}

/** `/a/b/c` → `/a`, `/a/b`, `/a/b/c`. */
function prefixesOf(target: string): string[] {
  const parts = target.split('/').filter(Boolean);
  return parts.map((_, i) => `/${parts.slice(0, i + 1).join('/')}`);
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
