/**
 * What the Docker driver reads from an image before a sandbox of it runs, kept per image ID:
 * whether a mount target is a symbolic link (mount-targets.ts) and what a writable root holds
 * (seed-roots.ts). Both are read through a never-started container of the image and the engine's
 * archive API, which costs a container create and remove plus 100–140 ms per archive read on
 * Docker 20.10 (issue 14: 450 of a cold lease's 700 ms). An image ID is the digest of the
 * image's config, which names its layers' content: what was read once for an ID holds for every
 * later sandbox of it, so only the first lease of an image pays.
 *
 * Kept on the control plane's disk (`<data dir>/image-survey/<id>/`, owner-only): `facts.json`
 * (link targets by path, the roots found empty) and `root-<sha256 of the path>.tar` (a root's
 * archive, when at most SURVEY_ARCHIVE_MAX_BYTES; a larger root is read from the image for each
 * lease). Files are written whole, synced and renamed into place, so a reader never sees half of
 * one; this process writes one image's facts one change at a time, and two control planes doing
 * so at once can only lose an entry, which a later lease reads again. Recording is best effort:
 * a record that cannot be written only means the next lease reads the image again. A verdict
 * is recorded only when the source container was still there after the read (image-source.ts:
 * a vanished container answers 404, which reads as "no link" or "empty"); a recorded archive
 * that fails to unpack into a healthy sandbox is forgotten. Records of images the engine no
 * longer has, and temporary files left by a crash, go with `sweep` (a background task).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';

/**
 * The longest a lease waits for another lease's read of the same part of an image (ms); then it
 * reads for itself. No engine call has a deadline of its own: a stalled read must not hold every
 * lease of its image (each waiting with its volumes made, or its sandbox started) for ever.
 */
export const SURVEY_WAIT_MAX_MS = 60_000;

/**
 * The format of `facts.json`: a file of another version reads as nothing recorded. 2: verdicts
 * are recorded only once confirmed through a source container still there (image-source.ts);
 * the records of earlier code may hold a vanished container's 404s as "no link".
 */
const FACTS_VERSION = 2;

/** A temporary file older than this is a crashed write's: `sweep` removes it (ms). */
const STALE_TMP_MS = 3600_000;

/** The largest root archive kept (bytes): dotfiles and small repositories; larger roots are read per lease. */
export const SURVEY_ARCHIVE_MAX_BYTES = 16 * 1024 * 1024;

/** What is recorded of one image (`facts.json`). */
interface ImageFacts {
  /** Link target by absolute path; null: not a link (or absent). */
  links: Record<string, string | null>;
  /** Source paths of writable roots the image has nothing at. */
  emptyRoots: string[];
  /** Source paths of writable roots larger than SURVEY_ARCHIVE_MAX_BYTES: read per lease. */
  largeRoots: string[];
}

/**
 * A writable root's recorded content: nothing, its archive (a stream the caller consumes), or
 * too large to keep (read from the image for each lease).
 */
export type RecordedRoot = { kind: 'empty' } | { kind: 'large' } | { kind: 'archive'; archive: Readable };

/** The image facts of one image ID, read and written on the control plane's disk. */
export class ImageSurvey {
  /** Reads of an image running in this process, by image ID and what they read. */
  private readonly flights = new Map<string, Promise<unknown>>();
  /** The last change of each image's facts in this process: the next one waits for it. */
  private readonly changes = new Map<string, Promise<void>>();

  /**
   * `dir`: the survey's directory (`<data dir>/image-survey`); made on first write. `waitMaxMs`:
   * the longest `once` waits for another read (SURVEY_WAIT_MAX_MS).
   */
  constructor(
    private readonly dir: string,
    private readonly options: { waitMaxMs: number } = { waitMaxMs: SURVEY_WAIT_MAX_MS },
  ) {}

  /**
   * Runs `read` (which looks at the records first and records what it reads), but when a read of
   * the same `what` of `imageId` (`links`, `root <path>`) runs already in this process, only
   * once that one ended: then `read` finds the records it made and reads only what they lack
   * (nothing, unless that read failed or a root is too large to keep). So concurrent first
   * leases of an image (a fork of N, a burst) read each part of it once, and wait only at the
   * parts not recorded yet (mount-targets.ts, seed-roots.ts). Waiters then run side by side,
   * not one after another, also after a failed read, and after SURVEY_WAIT_MAX_MS at most.
   */
  async once<T>(imageId: string, what: string, read: () => Promise<T>): Promise<T> {
    const key = `${imageId} ${what}`;
    const running = this.flights.get(key);
    if (running) {
      let timer: NodeJS.Timeout | undefined;
      const waitedOut = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.options.waitMaxMs)));
      await Promise.race([running.catch(() => undefined), waitedOut]);
      clearTimeout(timer);
      return read();
    }
    const flight = read();
    this.flights.set(key, flight);
    try {
      return await flight;
    } finally {
      this.flights.delete(key);
    }
  }

  /**
   * What is recorded of `imageId`, read once (the lease's view: one read of `facts.json`; an
   * archive is opened when asked for). Nothing recorded when the facts are absent or damaged.
   */
  async record(imageId: string): Promise<ImageRecord> {
    return new ImageRecord(await this.read(imageId), (sourcePath) => this.archivePath(imageId, sourcePath));
  }

  /** Records link targets of `imageId` found by a check (merged with what is recorded). */
  async recordLinks(imageId: string, found: ReadonlyMap<string, string | null>): Promise<void> {
    if (found.size === 0) return;
    await this.change(imageId, (facts) => ({ ...facts, links: { ...facts.links, ...Object.fromEntries(found) } }));
  }

  /** Forgets the recorded archive of `sourcePath` (one that failed to unpack). */
  async forgetRoot(imageId: string, sourcePath: string): Promise<void> {
    await rm(this.archivePath(imageId, sourcePath), { force: true }).catch(() => undefined);
  }

  /** Records that the image has nothing at `sourcePath`. */
  async recordEmpty(imageId: string, sourcePath: string): Promise<void> {
    await this.change(imageId, (facts) =>
      facts.emptyRoots.includes(sourcePath) ? null : { ...facts, emptyRoots: [...facts.emptyRoots, sourcePath] },
    );
  }

  /** Records that the image's content at `sourcePath` is larger than SURVEY_ARCHIVE_MAX_BYTES. */
  async recordLarge(imageId: string, sourcePath: string): Promise<void> {
    await this.change(imageId, (facts) =>
      facts.largeRoots.includes(sourcePath) ? null : { ...facts, largeRoots: [...facts.largeRoots, sourcePath] },
    );
  }

  /**
   * A recorder of the archive of `sourcePath` as it streams by: `write` each chunk (in order),
   * then `keep()` once the whole archive was written and used, or `drop()`. Past
   * SURVEY_ARCHIVE_MAX_BYTES it stops writing and keeps nothing. Null when the directory
   * cannot be made (nothing is recorded then).
   */
  async archiveRecorder(imageId: string, sourcePath: string): Promise<ArchiveRecorder | null> {
    const dir = await this.imageDir(imageId).catch(() => null);
    if (dir === null) return null;
    return new ArchiveRecorder(join(dir, `.${randomBytes(6).toString('hex')}.tmp`), this.archivePath(imageId, sourcePath));
  }

  /**
   * Removes the records of every image for which `present(imageId)` is false (the engine no
   * longer has it). Returns how many images' records went.
   */
  async sweep(present: (imageId: string) => Promise<boolean>): Promise<number> {
    let removed = 0;
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      const imageId = name.replace(/^sha256-/, 'sha256:');
      if (!imageId.startsWith('sha256:')) continue;
      if (!(await present(imageId))) {
        await rm(join(this.dir, name), { recursive: true, force: true });
        removed += 1;
        continue;
      }
      for (const file of await readdir(join(this.dir, name)).catch(() => [] as string[])) {
        if (!file.endsWith('.tmp')) continue;
        const tmp = join(this.dir, name, file);
        const modifiedMs = await stat(tmp).then(
          (st) => st.mtimeMs,
          () => Date.now(),
        );
        if (Date.now() - modifiedMs > STALE_TMP_MS) await rm(tmp, { force: true });
      }
    }
    return removed;
  }

  private archivePath(imageId: string, sourcePath: string): string {
    return join(this.dir, idName(imageId), `root-${createHash('sha256').update(sourcePath).digest('hex')}.tar`);
  }

  /** The image's facts; none recorded when the file is absent, damaged or unreadable (the image is read again). */
  private async read(imageId: string): Promise<ImageFacts> {
    try {
      const facts = JSON.parse(await readFile(join(this.dir, idName(imageId), 'facts.json'), 'utf8')) as Partial<ImageFacts> & {
        version?: number;
      };
      if (facts.version !== FACTS_VERSION) return { links: {}, emptyRoots: [], largeRoots: [] };
      return { links: facts.links ?? {}, emptyRoots: facts.emptyRoots ?? [], largeRoots: facts.largeRoots ?? [] };
    } catch {
      return { links: {}, emptyRoots: [], largeRoots: [] };
    }
  }

  /**
   * Applies `edit` to the image's facts (null: nothing to change), after the change before it
   * in this process, so none is lost to another's read-modify-write. Best effort: never throws.
   */
  private async change(imageId: string, edit: (facts: ImageFacts) => ImageFacts | null): Promise<void> {
    const before = this.changes.get(imageId) ?? Promise.resolve();
    const mine = before.then(async () => {
      const edited = edit(await this.read(imageId));
      if (edited !== null) await this.write(imageId, edited);
    });
    const settled = mine.catch(() => undefined);
    this.changes.set(imageId, settled);
    await settled;
    if (this.changes.get(imageId) === settled) this.changes.delete(imageId);
  }

  private async write(imageId: string, facts: ImageFacts): Promise<void> {
    const dir = await this.imageDir(imageId);
    const tmp = join(dir, `.${randomBytes(6).toString('hex')}.tmp`);
    try {
      const handle = await open(tmp, 'w', 0o600);
      try {
        await handle.writeFile(JSON.stringify({ version: FACTS_VERSION, ...facts }));
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(tmp, join(dir, 'facts.json'));
    } finally {
      await rm(tmp, { force: true });
    }
  }

  private async imageDir(imageId: string): Promise<string> {
    const dir = join(this.dir, idName(imageId));
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }
}

/**
 * What was recorded of one image when a lease looked (`ImageSurvey.record`): its facts as they
 * were then; a root's archive is opened when asked for (one kept or forgotten since is seen).
 */
export class ImageRecord {
  constructor(
    private readonly facts: ImageFacts,
    private readonly archivePath: (sourcePath: string) => string,
  ) {}

  /** The recorded link target of each of `paths`: a path never checked is absent. */
  links(paths: readonly string[]): Map<string, string | null> {
    return new Map(paths.filter((p) => p in this.facts.links).map((p) => [p, this.facts.links[p] ?? null]));
  }

  /**
   * The recorded content of the image's `sourcePath`, or null when it was never recorded (or
   * cannot be read: an empty archive file, which no whole archive is, counts as none).
   */
  async root(sourcePath: string): Promise<RecordedRoot | null> {
    if (this.facts.emptyRoots.includes(sourcePath)) return { kind: 'empty' };
    if (this.facts.largeRoots.includes(sourcePath)) return { kind: 'large' };
    const handle = await open(this.archivePath(sourcePath), 'r').catch(() => null);
    if (handle === null) return null;
    const sizeBytes = await handle.stat().then(
      (st) => st.size,
      () => 0,
    );
    if (sizeBytes === 0) {
      await handle.close();
      return null;
    }
    // The stream owns the handle and closes it at its end (or when destroyed).
    return { kind: 'archive', archive: handle.createReadStream() };
  }
}

/** Writes an archive to a temporary file as it streams by; renamed into place by `keep`. */
export class ArchiveRecorder {
  private file: WriteStream | null;
  private sizeBytes = 0;
  /** Set once the recording is abandoned: its file's removal. */
  private dropped: Promise<void> | null = null;

  constructor(
    private readonly tmpPath: string,
    private readonly finalPath: string,
  ) {
    this.file = createWriteStream(tmpPath, { mode: 0o600 });
    // A failed write only means nothing is kept (keep() sees the stream destroyed).
    this.file.on('error', () => undefined);
  }

  /** Whether the archive went past SURVEY_ARCHIVE_MAX_BYTES (nothing is kept then). */
  get tooLarge(): boolean {
    return this.sizeBytes > SURVEY_ARCHIVE_MAX_BYTES;
  }

  /** Adds `chunk`; past SURVEY_ARCHIVE_MAX_BYTES the recording is abandoned. */
  write(chunk: Buffer): void {
    if (this.file === null) return;
    this.sizeBytes += chunk.length;
    if (this.sizeBytes > SURVEY_ARCHIVE_MAX_BYTES) this.dropped = this.drop();
    else this.file.write(chunk);
  }

  /**
   * Keeps what was written as the root's archive, synced to disk (unless it was abandoned or a
   * write failed: then nothing). Never throws.
   */
  async keep(): Promise<void> {
    const file = this.file;
    this.file = null;
    if (file === null) return this.dropped ?? undefined;
    const written =
      !file.destroyed &&
      (await new Promise<boolean>((resolve) => {
        file.once('error', () => resolve(false));
        file.end(() => resolve(!file.errored));
      }));
    try {
      if (!written) return;
      // A crash after the rename must not leave a short archive in place.
      const handle = await open(this.tmpPath, 'r');
      await handle.sync().finally(() => handle.close());
      await rename(this.tmpPath, this.finalPath);
    } catch {
      // Nothing kept: a later lease reads the image again.
    } finally {
      if (!file.closed) await new Promise<void>((resolve) => file.once('close', () => resolve()));
      await rm(this.tmpPath, { force: true }).catch(() => undefined);
    }
  }

  /** Keeps nothing. Never throws. */
  async drop(): Promise<void> {
    const file = this.file;
    this.file = null;
    if (file === null) return this.dropped ?? undefined;
    file.destroy();
    // A stream that failed earlier has closed already: no second 'close' comes.
    if (!file.closed) await new Promise<void>((resolve) => file.once('close', () => resolve()));
    await rm(this.tmpPath, { force: true }).catch(() => undefined);
  }
}

/** A directory name for an image ID (`sha256:<hex>` → `sha256-<hex>`). */
function idName(imageId: string): string {
  return imageId.replace(/[^A-Za-z0-9._-]/g, '-');
}
