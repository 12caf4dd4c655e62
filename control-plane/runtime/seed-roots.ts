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
 *    reads each root's path from the image through it; what it held (nothing, or an archive up
 *    to SURVEY_ARCHIVE_MAX_BYTES) is recorded per image ID (image-survey.ts), so later leases of
 *    the image neither make the container nor read the image;
 * 2. the archive is unpacked inside the sandbox by `tar -x` run as the tool user (docker exec),
 *    so every file ends owned by the tool user (who may then write it; the image's owners are not
 *    kept: SWE-bench images own `/testbed` as root) with the image's modes, and the root's size
 *    limit applies as to any write: content that does not fit fails the create with
 *    `lease.writable_root_full`, and the caller removes everything.
 *
 * Cost: the content crosses the engine's API twice on an image's first lease (out of the image,
 * into the sandbox), once afterwards, and is held in memory (tmpfs pages, charged to the
 * sandbox); a root the image has nothing at costs one archive request on the first lease and
 * nothing later. Roots are copied side by side. The runtime's tar does the unpacking.
 */
import { AGENT_RUNTIME_TAR } from '../../contract/agent-runtime.js';
import { PassThrough, type Readable } from 'node:stream';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { AppError } from '../../contract/errors.js';
import { statusOf } from './docker-errors.js';
import { execInContainer } from './docker-exec.js';
import type { ImageSource } from './image-source.js';
import type { ArchiveRecorder, ImageRecord, ImageSurvey, RecordedRoot } from './image-survey.js';
import { SNAPSHOT_ROOTS_PREFIX, type SandboxSpec } from './runtime.js';
import { rootArchiveName, snapshotDirOf } from './snapshot-roots.js';

/** An archive this small holding one entry is the root directory alone: nothing to copy. */
const EMPTY_DIR_ARCHIVE_MAX_BYTES = 3 * 512;

/** What `seedWritableRoots` reads roots from besides the image. */
export interface SeedSources {
  /** Where snapshots keep their roots' archives (snapshot-roots.ts). */
  snapshotDir: string;
  /** Roots recorded per image ID (image-survey.ts): where what is read is recorded. */
  survey: ImageSurvey;
  /** What the survey had recorded of the image when the lease began (null: the image has no ID). */
  recorded: ImageRecord | null;
  /** The never-started container of the image, made only when a root must be read from it. */
  source: ImageSource;
}

/**
 * Copies the image's content at each of `spec.seedRoots` into the running container
 * `sbx-<lease>`, as `spec.seedUser`, all roots at once. Returns the paths that had content, in
 * `spec.seedRoots` order. Throws AppError `lease.writable_root_full` (`details`: `path`,
 * `sizeBytes`, `reason`), `lease.create_failed`. The caller removes `sources.source`.
 */
export async function seedWritableRoots(docker: Docker, spec: SandboxSpec, sources: SeedSources): Promise<string[]> {
  const archives = snapshotDirOf(sources.snapshotDir, spec.image);
  // Settled, all of them, before anything is concluded: the caller removes the source container
  // and the sandbox on a failure, which must not happen under a sibling root's read.
  const outcomes = await Promise.allSettled(
    spec.seedRoots.map(async (root) => {
      const archive = archives !== null && fromSnapshot(root) ? await openIfPresent(join(archives, snapshotArchiveName(root))) : null;
      return archive ? seedFrom(docker, spec, root, archive, {}) : seedFromImage(docker, spec, root, sources);
    }),
  );
  const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failed) throw failed.reason;
  return spec.seedRoots.filter((_, i) => (outcomes[i] as PromiseFulfilledResult<boolean>).value).map((r) => r.path);
}

type SeedRoot = SandboxSpec['seedRoots'][number];

function fromSnapshot(root: SeedRoot): root is SeedRoot & { from: string } {
  return root.from?.startsWith(`${SNAPSHOT_ROOTS_PREFIX}/`) ?? false;
}

function snapshotArchiveName(root: SeedRoot & { from: string }): string {
  return rootArchiveName(root.from.slice(SNAPSHOT_ROOTS_PREFIX.length));
}

/**
 * Copies the image's content at `root` (as recorded for its ID, else read and recorded, by one
 * lease of the image at a time); false when it has none.
 */
async function seedFromImage(docker: Docker, spec: SandboxSpec, root: SeedRoot, sources: SeedSources): Promise<boolean> {
  const { survey, source } = sources;
  const sourcePath = root.from ?? root.path;
  const imageId = source.imageId;
  if (imageId === null) return seedFromSource(docker, spec, root, source, undefined);
  const seed = async (recorded: RecordedRoot | null): Promise<boolean> => {
    if (recorded?.kind === 'empty') return false;
    const target = { survey, imageId, sourcePath };
    if (recorded?.kind === 'archive') return seedFrom(docker, spec, root, recorded.archive, { recordedIn: target });
    // Too large to keep: read for this lease, recording nothing.
    return seedFromSource(docker, spec, root, source, recorded?.kind === 'large' ? undefined : target);
  };
  const recorded = (await sources.recorded?.root(sourcePath)) ?? null;
  if (recorded !== null) return seed(recorded);
  // Read again under the hold: a lease that held it before may have recorded this root.
  return survey.once(imageId, `root ${sourcePath}`, async () => seed(await (await survey.record(imageId)).root(sourcePath)));
}

/** Copies the image's content at `root` read through `source` (recorded to `recordTo`); false when it has none. */
async function seedFromSource(
  docker: Docker,
  spec: SandboxSpec,
  root: SeedRoot,
  source: ImageSource,
  recordTo: RecordTarget | undefined,
): Promise<boolean> {
  const sourcePath = root.from ?? root.path;
  // Made before the archive is asked for: from its answer until tar takes it, nothing may be
  // awaited (a stream failing then would have no error listener, and tar would wait for ever).
  const recorder = recordTo ? await recordTo.survey.archiveRecorder(recordTo.imageId, recordTo.sourcePath) : null;
  let archive: Readable;
  try {
    archive = (await (await source.get()).getArchive({ path: sourcePath })) as unknown as Readable;
  } catch (err) {
    await recorder?.drop();
    if (statusOf(err) !== 404) throw err;
    // The image has nothing at this path, unless the 404 is a vanished source container's.
    await source.confirm();
    if (recordTo) await recordTo.survey.recordEmpty(recordTo.imageId, sourcePath);
    return false;
  }
  return seedFrom(docker, spec, root, archive, { recordTo, recorder });
}

/** Where a root's content is recorded: the survey, the image and the path read. */
interface RecordTarget {
  survey: ImageSurvey;
  imageId: string;
  sourcePath: string;
}

/**
 * Copies `archive` into `root` unless it holds the root directory alone (false). With
 * `recordTo`, what it held is recorded for the image (empty, the archive through `recorder` once
 * all of it was copied, or too large); with `recordedIn` (the archive is that record), a copy that fails in a
 * running sandbox for another reason than space forgets the record.
 */
async function seedFrom(
  docker: Docker,
  spec: SandboxSpec,
  root: SeedRoot,
  archive: Readable,
  {
    recordTo,
    recorder = null,
    recordedIn,
  }: { recordTo?: RecordTarget | undefined; recorder?: ArchiveRecorder | null; recordedIn?: RecordTarget | undefined },
): Promise<boolean> {
  try {
    const head = await readHead(archive, EMPTY_DIR_ARCHIVE_MAX_BYTES + 1).catch(async (err: unknown) => {
      await recorder?.drop();
      throw err;
    });
    if (head.ended && entryCount(head.bytes) <= 1) {
      await recorder?.drop();
      if (recordTo) await recordTo.survey.recordEmpty(recordTo.imageId, recordTo.sourcePath);
      return false;
    }
    try {
      await extractInSandbox(docker, spec, root, head.bytes, head.ended ? null : archive, recorder);
    } catch (err) {
      await recorder?.drop();
      const space = err instanceof AppError && err.code === 'lease.writable_root_full';
      if (recordedIn && !space && (await isRunning(docker, spec.name)))
        await recordedIn.survey.forgetRoot(recordedIn.imageId, recordedIn.sourcePath);
      throw err;
    }
    // Only a whole archive is kept (tar may stop reading at the end-of-archive blocks).
    if (head.ended || archive.readableEnded) await recorder?.keep();
    else await recorder?.drop();
    if (recordTo && recorder?.tooLarge) await recordTo.survey.recordLarge(recordTo.imageId, recordTo.sourcePath);
    return true;
  } finally {
    // A file's handle goes with its stream; an archive left unread is not held open.
    archive.destroy();
  }
}

/**
 * Reads up to `limit` bytes (or the whole stream when shorter; the chunk that crosses `limit`
 * is read whole); `ended` when that was all. The stream is left paused after those chunks.
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

/** Runs `tar -x` in the sandbox as the seed user, fed `head` then the rest of `rest` (each byte also to `recorder`). */
async function extractInSandbox(
  docker: Docker,
  spec: SandboxSpec,
  root: SandboxSpec['seedRoots'][number],
  head: Buffer,
  rest: Readable | null,
  recorder: ArchiveRecorder | null,
): Promise<void> {
  const input = new PassThrough();
  input.write(head);
  recorder?.write(head);
  if (rest) {
    rest.on('error', (err) => input.destroy(err));
    if (recorder) rest.on('data', (chunk: Buffer) => recorder.write(chunk));
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

/** Whether the sandbox's container runs (a failed inspect counts as not). */
async function isRunning(docker: Docker, name: string): Promise<boolean> {
  const info = (await docker
    .getContainer(name)
    .inspect()
    .catch(() => null)) as { State?: { Running?: boolean } } | null;
  return info?.State?.Running === true;
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
