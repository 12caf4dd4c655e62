/**
 * A snapshot of a running sandbox as an image (issue 12 part 5): the container's changed files
 * (`docker commit`, with the container paused for the commit) plus the content of every writable
 * root, which a commit skips (volumes and tmpfs mounts are not in the container's layer).
 *
 * Each root's content is stored in the image under `/.sbx-snapshot/roots/<path>`, not at its
 * path: the path keeps the original image's content (hidden in a sandbox by the mount anyway),
 * and a lease of the snapshot seeds each root from there (seed-roots.ts), so files deleted in a
 * root stay deleted in its forks. N forks of one snapshot share its read-only layers and no
 * writable state: each gets fresh roots of its own, filled by copy.
 *
 * Steps: commit (paused) → a staging container of the committed image (never started, labelled
 * `sbx.role=snapshot` with the parent lease, so teardown and reconcile reap it after a crash) →
 * each root archived in the sandbox by `tar -c` as the tool user and written into the staging
 * container through the archive API → commit of the staging container, tagged
 * `sbx-snapshot:<image id hex>` and labelled → staging container removed.
 *
 * Consistency: only the commit runs paused; the roots are archived one after another while the
 * sandbox runs, so a file written during the capture may or may not be in it (the snapshot says
 * so: `consistent: false`). A file the tool user cannot read fails the capture
 * (`snapshot.capture_failed`), and nothing is left.
 */
import { AGENT_RUNTIME_TAR } from '../../contract/agent-runtime.js';
import { PassThrough, Writable } from 'node:stream';
import type Docker from 'dockerode';
import { AppError } from '../../contract/errors.js';
import { LABEL, ownershipLabels, SNAPSHOT_ROOTS_PREFIX, type CapturedImage, type SnapshotCapture } from './runtime.js';

/** Repository of snapshot images; the tag is the hex of the image id. */
export const SNAPSHOT_REPO = 'sbx-snapshot';

/** Captures lease `spec.leaseId`'s sandbox. Throws `snapshot.capture_failed`, `lease.not_ready` (no running container). */
export async function captureSnapshot(docker: Docker, spec: SnapshotCapture): Promise<CapturedImage> {
  try {
    return await capture(docker, spec);
  } catch (err) {
    if (err instanceof AppError) throw err;
    throw new AppError('snapshot.capture_failed', `Docker could not capture the sandbox: ${messageOf(err)}`, { cause: err });
  }
}

async function capture(docker: Docker, spec: SnapshotCapture): Promise<CapturedImage> {
  const container = docker.getContainer(`sbx-${spec.leaseId}`);
  let base: { Image: string; State: { Running: boolean } };
  try {
    base = (await container.inspect()) as typeof base;
  } catch (err) {
    throw new AppError('lease.not_ready', `sandbox ${spec.leaseId} has no container`, { cause: err });
  }
  if (!base.State.Running) throw new AppError('lease.not_ready', `sandbox ${spec.leaseId} is not running`);
  const committed = (await container.commit({ pause: true })) as { Id: string };
  // Never started; its command is the sandbox's, since the commit of it makes the snapshot's config.
  const config = ((await docker.getImage(committed.Id).inspect()) as { Config?: { Entrypoint?: string[] | null; Cmd?: string[] | null } })
    .Config;
  const command = (config?.Entrypoint?.length ?? 0) + (config?.Cmd?.length ?? 0) > 0;
  const staging = await docker.createContainer({
    Image: committed.Id,
    name: `sbx-${spec.leaseId}-snap-${Date.now().toString(36)}`,
    ...(command ? {} : { Entrypoint: ['/nonexistent/sbx-snapshot-staging'] }),
    Labels: { [LABEL.lease]: spec.leaseId, [LABEL.role]: 'snapshot', ...ownershipLabels(spec.ownership) },
    NetworkDisabled: true,
    HostConfig: { NetworkMode: 'none' },
  });
  try {
    for (const root of spec.roots) await copyRoot(docker, spec, root, staging);
    // The staging container's role label would pass to every sandbox of the snapshot: emptied.
    const changes = `LABEL ${Object.entries({ ...spec.labels, [LABEL.role]: '' })
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(' ')}`;
    const image = (await staging.commit({ pause: false, changes })) as { Id: string };
    const imageId = image.Id.startsWith('sha256:') ? image.Id : `sha256:${image.Id}`;
    const tag = imageId.slice('sha256:'.length);
    await docker.getImage(imageId).tag({ repo: SNAPSHOT_REPO, tag });
    const [mine, parent] = await Promise.all([docker.getImage(imageId).inspect(), docker.getImage(base.Image).inspect()]);
    return { ref: `${SNAPSHOT_REPO}:${tag}`, imageId, sizeBytes: Math.max(0, Number(mine.Size) - Number(parent.Size)) };
  } finally {
    await staging.remove({ force: true }).catch(() => undefined);
    // The committed rootfs stays only as the snapshot image's parent; alone (a failed capture) it goes.
    await docker
      .getImage(committed.Id)
      .remove({ noprune: false })
      .catch(() => undefined);
  }
}

/**
 * Removes a snapshot image (and the untagged parent it was committed on). Absence is success.
 * Throws `snapshot.in_use` (a container uses it), `runtime.unavailable`.
 */
export async function removeSnapshotImage(docker: Docker, ref: string): Promise<void> {
  try {
    await docker.getImage(ref).remove({ force: false, noprune: false });
  } catch (err) {
    const status = (err as { statusCode?: number }).statusCode;
    if (status === 404) return;
    if (status === 409) throw new AppError('snapshot.in_use', `snapshot image ${ref} is used by a container`, { cause: err });
    throw new AppError('runtime.unavailable', `Docker engine: remove image failed: ${messageOf(err)}`, { cause: err });
  }
}

function messageOf(err: unknown): string {
  const json = (err as { json?: { message?: string } } | null)?.json;
  return json?.message ?? (err instanceof Error ? err.message : String(err));
}

/** `tar -c` of `root` in the sandbox as the tool user, entries under SNAPSHOT_ROOTS_PREFIX, into the staging container. */
async function copyRoot(docker: Docker, spec: SnapshotCapture, root: string, staging: Docker.Container): Promise<void> {
  const exec = await docker.getContainer(`sbx-${spec.leaseId}`).exec({
    // S: symlink targets are kept as they are; only names move under the prefix.
    Cmd: [AGENT_RUNTIME_TAR, '-c', '-f', '-', '-C', '/', `--transform=s,^,${SNAPSHOT_ROOTS_PREFIX.slice(1)}/,S`, '--', root.slice(1)],
    User: `${spec.user.uid}:${spec.user.gid}`,
    AttachStdout: true,
    AttachStderr: true,
    WorkingDir: '/',
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as NodeJS.ReadableStream;
  const stdout = new PassThrough();
  const stderrChunks: Buffer[] = [];
  const stderr = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (stderrChunks.length < 64) stderrChunks.push(chunk);
      cb();
    },
  });
  docker.modem.demuxStream(stream, stdout, stderr);
  stream.on('end', () => stdout.end());
  let putError: unknown = null;
  await staging.putArchive(stdout, { path: '/' }).catch((err: unknown) => (putError = err));
  const exitCode = Number((await exec.inspect()).ExitCode ?? -1);
  if (putError !== null && (exitCode === 0 || exitCode === 1)) {
    throw new AppError('snapshot.capture_failed', `writing the writable root ${root} into the snapshot failed: ${String(putError)}`, {
      details: { path: root },
      cause: putError,
    });
  }
  // GNU tar exits 1 when a file changed while it was read: the sandbox runs on (not consistent, by design).
  if (exitCode === 0 || exitCode === 1) return;
  const text = Buffer.concat(stderrChunks).toString('utf8').trim();
  throw new AppError(
    'snapshot.capture_failed',
    `archiving the writable root ${root} failed: ${text.split('\n')[0] ?? `tar exited ${exitCode}`}`,
    {
      details: { path: root, stderr: text.slice(0, 2000) },
    },
  );
}
