/**
 * A snapshot of a running sandbox (issue 12 part 5): the container's changed files as an image
 * (`docker commit`, with the container paused for the commit) plus the content of every writable
 * root, which a commit skips (volumes and tmpfs mounts are not in the container's layer), as one
 * tar file per root on the engine's host beside it (snapshot-roots.ts says why and how safely).
 *
 * The image is tagged `sbx-snapshot:<image id hex>` and labelled (`sbx.snapshot.*`); the roots'
 * archives are in `<snapshot dir>/<image id hex>/`. A lease of the snapshot seeds each root from
 * its archive (seed-roots.ts), so files deleted in a root stay deleted in its forks. N forks of
 * one snapshot share its read-only layers and archives and no writable state: each gets fresh
 * roots of its own, filled by copy. (A snapshot taken before the archives existed keeps its roots
 * in the image under `/.sbx-snapshot/roots/<path>`; seeding still reads those from there.)
 *
 * Steps: the commit and the roots' archives run at once (the archives into a directory named for
 * the capture, renamed to the image's once the commit has its id) → the image tagged. Whatever
 * fails, nothing is left: the image and the archives are removed again.
 *
 * Consistency: only the commit runs paused; the roots are archived while the sandbox runs, so a
 * file written during the capture may or may not be in it (the snapshot says so: `consistent:
 * false`). A file the tool user cannot read fails the capture (`snapshot.capture_failed`).
 *
 * Content address: the snapshot's digest is the digest (contract/digest.ts) of the image id and
 * each root's path and archive SHA-256.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import type { CapturedImage, SnapshotCapture } from './runtime.js';
import { archiveRoots, snapshotDirOf, type RootArchive } from './snapshot-roots.js';

/** Repository of snapshot images; the tag is the hex of the image id. */
export const SNAPSHOT_REPO = 'sbx-snapshot';

/**
 * Captures lease `spec.leaseId`'s sandbox; the roots' archives go under `snapshotDir`. Throws
 * `snapshot.capture_failed`, `lease.not_ready` (no running container).
 */
export async function captureSnapshot(docker: Docker, snapshotDir: string, spec: SnapshotCapture): Promise<CapturedImage> {
  try {
    return await capture(docker, snapshotDir, spec);
  } catch (err) {
    if (err instanceof AppError) throw err;
    throw new AppError('snapshot.capture_failed', `Docker could not capture the sandbox: ${messageOf(err)}`, { cause: err });
  }
}

async function capture(docker: Docker, snapshotDir: string, spec: SnapshotCapture): Promise<CapturedImage> {
  const container = docker.getContainer(`sbx-${spec.leaseId}`);
  let base: { Image: string; State: { Running: boolean; Pid: number } };
  try {
    base = (await container.inspect()) as typeof base;
  } catch (err) {
    throw new AppError('lease.not_ready', `sandbox ${spec.leaseId} has no container`, { cause: err });
  }
  if (!base.State.Running || !(base.State.Pid > 0)) throw new AppError('lease.not_ready', `sandbox ${spec.leaseId} is not running`);
  const changes = `LABEL ${Object.entries(spec.labels)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(' ')}`;
  const staging = join(snapshotDir, `.capture-${spec.leaseId}-${randomBytes(6).toString('hex')}`);
  await mkdir(staging, { recursive: true, mode: 0o700 });
  let imageId: string | null = null;
  let kept: string | null = null;
  try {
    const [committed, archived] = await Promise.allSettled([
      container.commit({ pause: true, changes }) as Promise<{ Id: string }>,
      archiveRoots(base.State.Pid, spec.roots, spec.user, staging),
    ]);
    if (committed.status === 'fulfilled')
      imageId = committed.value.Id.startsWith('sha256:') ? committed.value.Id : `sha256:${committed.value.Id}`;
    if (archived.status === 'rejected') throw archived.reason;
    if (committed.status === 'rejected') throw committed.reason;
    const tag = imageId!.slice('sha256:'.length);
    kept = snapshotDirOf(snapshotDir, `${SNAPSHOT_REPO}:${tag}`)!;
    await rename(staging, kept);
    const archives: RootArchive[] = archived.value;
    await docker.getImage(imageId!).tag({ repo: SNAPSHOT_REPO, tag });
    const [mine, parent] = await Promise.all([docker.getImage(imageId!).inspect(), docker.getImage(base.Image).inspect()]);
    const rootBytes = archives.reduce((sum, a) => sum + a.sizeBytes, 0);
    return {
      ref: `${SNAPSHOT_REPO}:${tag}`,
      imageId: imageId!,
      digest: digestOf({ image: imageId, roots: archives.map((a) => ({ path: a.path, sha256: a.sha256 })) }),
      sizeBytes: Math.max(0, Number(mine.Size) - Number(parent.Size)) + rootBytes,
    };
  } catch (err) {
    if (kept !== null) await rm(kept, { recursive: true, force: true }).catch(() => undefined);
    if (imageId !== null)
      await docker
        .getImage(imageId)
        .remove({ force: true, noprune: false })
        .catch(() => undefined);
    throw err;
  } finally {
    await rm(staging, { recursive: true, force: true }).catch(() => undefined);
  }
}

/**
 * Removes a snapshot image (and the untagged parent an older snapshot was committed on), then its
 * roots' archives under `snapshotDir`. Absence is success. Throws `snapshot.in_use` (a container
 * uses it; nothing is removed), `runtime.unavailable`.
 */
export async function removeSnapshotImage(docker: Docker, snapshotDir: string, ref: string): Promise<void> {
  try {
    await docker.getImage(ref).remove({ force: false, noprune: false });
  } catch (err) {
    const status = (err as { statusCode?: number }).statusCode;
    if (status === 409) throw new AppError('snapshot.in_use', `snapshot image ${ref} is used by a container`, { cause: err });
    if (status !== 404) throw new AppError('runtime.unavailable', `Docker engine: remove image failed: ${messageOf(err)}`, { cause: err });
  }
  const dir = snapshotDirOf(snapshotDir, ref);
  if (dir !== null) await rm(dir, { recursive: true, force: true });
}

function messageOf(err: unknown): string {
  const json = (err as { json?: { message?: string } } | null)?.json;
  return json?.message ?? (err instanceof Error ? err.message : String(err));
}
