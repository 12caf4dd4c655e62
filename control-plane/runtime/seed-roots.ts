/**
 * Seeding writable roots with the image's content (issue 12 part 3). A writable root is mounted
 * over its path and would hide what the image has there (a SWE-bench image keeps its repository
 * at `/testbed`); sbx copies that content in once the container runs, before its lease is ready.
 *
 * Why not Docker's own copy-up: on this engine (20.10) a named volume is filled from the image
 * when the container is created, but sbx's volumes are tmpfs-backed (size-limited) local
 * volumes, which the engine unmounts again after the copy, so the content is gone by the time the
 * container starts (verified: an empty root). Container tmpfs mounts have no copy-up at all (the
 * engine refuses runc's `tmpcopyup` option). One mechanism serves both kinds instead:
 *
 * 1. a container of the image is created, never started (`sbx-<lease>-seed`, labelled with the
 *    lease and `sbx.role=seed`, so teardown and reconcile reap it), and the engine's archive API
 *    reads each root's path from the image through it;
 * 2. the archive is unpacked inside the sandbox by `tar -x` run as the tool user (docker exec),
 *    so every file ends owned by the tool user (who may then write it; the image's owners are not
 *    kept: SWE-bench images own `/testbed` as root) with the image's modes, and the root's size
 *    limit applies as to any write: content that does not fit fails the create with
 *    `lease.writable_root_full`, and the caller removes everything.
 *
 * Cost: the content crosses the engine's API twice (out of the image, into the sandbox) and is
 * held in memory (tmpfs pages, charged to the sandbox); a root the image has nothing at costs
 * one archive request and no exec. Needs `tar` in the image (as uploads do).
 */
import { AGENT_RUNTIME_TAR } from '../../contract/agent-runtime.js';
import { PassThrough, type Readable } from 'node:stream';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { AppError } from '../../contract/errors.js';
import { execInContainer } from './docker-exec.js';
import { LABEL, ownershipLabels, SNAPSHOT_ROOTS_PREFIX, type SandboxSpec } from './runtime.js';
import { rootArchiveName, snapshotDirOf } from './snapshot-roots.js';

/** An archive this small holding one entry is the root directory alone: nothing to copy. */
const EMPTY_DIR_ARCHIVE_MAX_BYTES = 3 * 512;

/**
 * Copies the image's content at each of `spec.seedRoots` into the running container
 * `sbx-<lease>`, as `spec.seedUser`. Returns the paths that had content. Throws AppError
 * `lease.writable_root_full` (`details`: `path`, `sizeBytes`, `reason`), `lease.create_failed`.
 * The seed container is removed whatever happens.
 */
export async function seedWritableRoots(docker: Docker, spec: SandboxSpec, snapshotDir: string): Promise<string[]> {
  if (spec.seedRoots.length === 0) return [];
  // A snapshot's roots are archives on the host (snapshot-roots.ts); an older snapshot's are in its image.
  const archives = snapshotDirOf(snapshotDir, spec.image);
  const source = await docker.createContainer({
    name: `sbx-${spec.leaseId}-seed`,
    Image: spec.pinnedImage ?? spec.image,
    // Never started: an entrypoint only because the engine refuses a container without a command.
    Entrypoint: ['/nonexistent/sbx-seed-source'],
    Cmd: [],
    Labels: { [LABEL.lease]: spec.leaseId, [LABEL.role]: 'seed', ...ownershipLabels(spec.ownership) },
    NetworkDisabled: true,
    HostConfig: { NetworkMode: 'none' },
  });
  try {
    const seeded: string[] = [];
    for (const root of spec.seedRoots) {
      let archive: Readable | null = null;
      if (archives !== null && root.from?.startsWith(`${SNAPSHOT_ROOTS_PREFIX}/`))
        archive = await openIfPresent(join(archives, rootArchiveName(root.from.slice(SNAPSHOT_ROOTS_PREFIX.length))));
      try {
        archive ??= (await source.getArchive({ path: root.from ?? root.path })) as unknown as Readable;
      } catch (err) {
        if (statusOf(err) === 404) continue; // the image has nothing at this path
        throw err;
      }
      const head = await readHead(archive, EMPTY_DIR_ARCHIVE_MAX_BYTES + 1);
      if (head.ended && entryCount(head.bytes) <= 1) continue;
      try {
        await extractInSandbox(docker, spec, root, head.bytes, head.ended ? null : archive);
      } catch (err) {
        // The sandbox's agent died meanwhile: the caller reports that (with its last words), not the copy.
        if (!(await isRunning(docker, spec.name))) return seeded;
        throw err;
      }
      seeded.push(root.path);
    }
    return seeded;
  } finally {
    await source.remove({ force: true }).catch(() => undefined);
  }
}

/**
 * Reads up to `limit` bytes (or the whole stream when shorter); `ended` when that was all. The
 * stream is left paused, with what it had after the head still unread (unshifted back).
 */
function readHead(stream: Readable, limit: number): Promise<{ bytes: Buffer; ended: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (ended: boolean): void => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', reject);
      resolve({ bytes: Buffer.concat(chunks), ended });
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      size += chunk.length;
      if (size >= limit) {
        stream.pause();
        done(false);
      }
    };
    const onEnd = (): void => done(true);
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', reject);
  });
}

/** Headers in a short tar archive (non-zero 512-byte blocks that are not file data: enough for a small archive). */
function entryCount(tar: Buffer): number {
  let count = 0;
  for (let off = 0; off + 512 <= tar.length;) {
    const block = tar.subarray(off, off + 512);
    if (block.every((b) => b === 0)) break;
    count++;
    const size = parseInt(block.subarray(124, 136).toString('ascii').replace(/\0.*$/, '').trim() || '0', 8);
    off += 512 + Math.ceil((Number.isFinite(size) ? size : 0) / 512) * 512;
  }
  return count;
}

/** Runs `tar -x` in the sandbox as the seed user, fed `head` then the rest of `rest`. */
async function extractInSandbox(
  docker: Docker,
  spec: SandboxSpec,
  root: SandboxSpec['seedRoots'][number],
  head: Buffer,
  rest: Readable | null,
): Promise<void> {
  const input = new PassThrough();
  input.write(head);
  if (rest) {
    rest.on('error', (err) => input.destroy(err));
    rest.pipe(input);
    rest.resume();
  } else {
    input.end();
  }
  const run = await execInContainer(docker, {
    container: spec.name,
    // The archive's first component is the root's own name (or `.`); its directory is the mount's.
    // The runtime's tar, not the image's (an image may have none).
    cmd: [AGENT_RUNTIME_TAR, '-x', '-p', '--no-same-owner', '--strip-components=1', '-C', root.path, '-f', '-'],
    user: spec.seedUser,
    stdin: input,
  });
  run.stdout.resume();
  const { exitCode, stderr } = await run.done;
  if (exitCode === 0) return;
  const reason = stderr.split('\n').find((l) => l.trim()) ?? `tar exited ${exitCode}`;
  if (/No space left on device|Wrote only \d+ of \d+ bytes/.test(stderr)) {
    throw new AppError(
      'lease.writable_root_full',
      `the image's content at ${root.path} does not fit the writable root's ${root.sizeBytes} bytes`,
      { details: { path: root.path, sizeBytes: root.sizeBytes, reason } },
    );
  }
  throw new AppError('lease.create_failed', `copying the image's content into the writable root ${root.path} failed: ${reason}`, {
    details: { path: root.path, stderr: stderr.slice(0, 2000) },
  });
}

async function isRunning(docker: Docker, name: string): Promise<boolean> {
  try {
    const info = (await docker.getContainer(name).inspect()) as { State?: { Running?: boolean } };
    return info.State?.Running === true;
  } catch {
    return false;
  }
}

function statusOf(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'statusCode' in err ? Number((err as { statusCode: unknown }).statusCode) : undefined;
}

/** A read stream of `file`, or null when there is none. */
async function openIfPresent(file: string): Promise<Readable | null> {
  try {
    // The stream owns the handle and closes it at its end.
    return (await open(file, 'r')).createReadStream();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
