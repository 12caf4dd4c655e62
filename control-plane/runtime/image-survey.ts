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
 * lease). Files are written whole and renamed into place, so a reader never sees half of one;
 * two control planes writing the same facts at once can only lose an entry, which the next lease
 * reads again. Entries are never wrong for their ID; those of images the engine no longer has
 * go with `sweep` (the control plane's background tasks run it).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { LABEL, ownershipLabels, type Ownership } from './runtime.js';

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

  /** `dir`: the survey's directory (`<data dir>/image-survey`); made on first write. */
  constructor(private readonly dir: string) {}

  /**
   * Runs `read` (which looks at the records first and records what it reads), but when a read of
   * the same `what` of `imageId` runs already in this process, only once that one ended: then
   * `read` finds its records and reads nothing. So concurrent first leases of an image (a fork
   * of N, a burst) read it once (docker-runtime.ts). Waiters then run side by side, not one
   * after another.
   */
  async once<T>(imageId: string, what: string, read: () => Promise<T>): Promise<T> {
    const key = `${imageId} ${what}`;
    const running = this.flights.get(key);
    if (running) {
      await running.catch(() => undefined);
      return read();
    }
    const flight = read();
    this.flights.set(key, flight);
    try {
      return await flight;
    } finally {
      if (this.flights.get(key) === flight) this.flights.delete(key);
    }
  }

  /** The recorded link target of each of `paths` in `imageId`: a path never checked is absent. */
  async links(imageId: string, paths: readonly string[]): Promise<Map<string, string | null>> {
    const facts = await this.read(imageId);
    return new Map(paths.filter((p) => p in facts.links).map((p) => [p, facts.links[p] ?? null]));
  }

  /** Records link targets of `imageId` found by a check (merged with what is recorded). */
  async recordLinks(imageId: string, found: ReadonlyMap<string, string | null>): Promise<void> {
    if (found.size === 0) return;
    const facts = await this.read(imageId);
    await this.write(imageId, { ...facts, links: { ...facts.links, ...Object.fromEntries(found) } });
  }

  /** The recorded content of the image's `sourcePath`, or null when it was never recorded. */
  async root(imageId: string, sourcePath: string): Promise<RecordedRoot | null> {
    const facts = await this.read(imageId);
    if (facts.emptyRoots.includes(sourcePath)) return { kind: 'empty' };
    if (facts.largeRoots.includes(sourcePath)) return { kind: 'large' };
    try {
      // The stream owns the handle and closes it at its end.
      return { kind: 'archive', archive: (await open(this.archivePath(imageId, sourcePath), 'r')).createReadStream() };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  /** Records that the image has nothing at `sourcePath`. */
  async recordEmpty(imageId: string, sourcePath: string): Promise<void> {
    const facts = await this.read(imageId);
    if (facts.emptyRoots.includes(sourcePath)) return;
    await this.write(imageId, { ...facts, emptyRoots: [...facts.emptyRoots, sourcePath] });
  }

  /** Records that the image's content at `sourcePath` is larger than SURVEY_ARCHIVE_MAX_BYTES. */
  async recordLarge(imageId: string, sourcePath: string): Promise<void> {
    const facts = await this.read(imageId);
    if (facts.largeRoots.includes(sourcePath)) return;
    await this.write(imageId, { ...facts, largeRoots: [...facts.largeRoots, sourcePath] });
  }

  /**
   * Whether everything a lease reads from `imageId` is recorded: the link target of each of
   * `linkPaths` and the content of each of `rootPaths` (empty, an archive, or too large).
   */
  async complete(imageId: string, linkPaths: readonly string[], rootPaths: readonly string[]): Promise<boolean> {
    const facts = await this.read(imageId);
    if (!linkPaths.every((p) => p in facts.links)) return false;
    for (const path of rootPaths) {
      if (facts.emptyRoots.includes(path) || facts.largeRoots.includes(path)) continue;
      const archive = await open(this.archivePath(imageId, path), 'r').catch(() => null);
      if (archive === null) return false;
      await archive.close();
    }
    return true;
  }

  /**
   * A recorder of the archive of `sourcePath` as it streams by: `write` each chunk (in order),
   * then `keep()` once the whole archive was written and used, or `drop()`. Past
   * SURVEY_ARCHIVE_MAX_BYTES it stops writing and keeps nothing.
   */
  async archiveRecorder(imageId: string, sourcePath: string): Promise<ArchiveRecorder> {
    const dir = await this.imageDir(imageId);
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
      if (!imageId.startsWith('sha256:') || (await present(imageId))) continue;
      await rm(join(this.dir, name), { recursive: true, force: true });
      removed += 1;
    }
    return removed;
  }

  private archivePath(imageId: string, sourcePath: string): string {
    return join(this.dir, idName(imageId), `root-${createHash('sha256').update(sourcePath).digest('hex')}.tar`);
  }

  private async read(imageId: string): Promise<ImageFacts> {
    try {
      const facts = JSON.parse(await readFile(join(this.dir, idName(imageId), 'facts.json'), 'utf8')) as Partial<ImageFacts>;
      return { links: facts.links ?? {}, emptyRoots: facts.emptyRoots ?? [], largeRoots: facts.largeRoots ?? [] };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { links: {}, emptyRoots: [], largeRoots: [] };
      // A file this process did not write whole cannot be read: what it held is read again.
      if (err instanceof SyntaxError) return { links: {}, emptyRoots: [], largeRoots: [] };
      throw err;
    }
  }

  private async write(imageId: string, facts: ImageFacts): Promise<void> {
    const dir = await this.imageDir(imageId);
    const tmp = join(dir, `.${randomBytes(6).toString('hex')}.tmp`);
    await writeFile(tmp, JSON.stringify(facts), { mode: 0o600 });
    await rename(tmp, join(dir, 'facts.json'));
  }

  private async imageDir(imageId: string): Promise<string> {
    const dir = join(this.dir, idName(imageId));
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
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

  /** Keeps what was written as the root's archive (unless it was abandoned or a write failed). */
  async keep(): Promise<void> {
    const file = this.file;
    this.file = null;
    if (file === null) return this.dropped ?? undefined;
    const written = await new Promise<boolean>((resolve) => {
      file.once('error', () => resolve(false));
      file.end(() => resolve(!file.errored));
    });
    if (written) await rename(this.tmpPath, this.finalPath).catch(() => undefined);
    await rm(this.tmpPath, { force: true });
  }

  /** Keeps nothing. */
  async drop(): Promise<void> {
    const file = this.file;
    this.file = null;
    if (file === null) return this.dropped ?? undefined;
    await new Promise<void>((resolve) => file.destroy().once('close', () => resolve()));
    await rm(this.tmpPath, { force: true });
  }
}

/**
 * A never-started container of a sandbox's image (`sbx-<lease>-seed`, labelled with the lease and
 * `sbx.role=seed`, so teardown and reconcile reap it), made on first use: the engine's archive
 * API reads the image through it. `remove` is safe to call when it was never made.
 */
export class ImageSource {
  private container: Promise<Docker.Container> | null = null;

  constructor(
    private readonly docker: Docker,
    private readonly spec: { leaseId: string; image: string; pinnedImage?: string; ownership: Ownership },
  ) {}

  /** The image ID facts are recorded under, or null when the image was not pinned to one. */
  get imageId(): string | null {
    const pinned = this.spec.pinnedImage;
    return pinned?.startsWith('sha256:') ? pinned : null;
  }

  /** The source container, created on the first call. */
  get(): Promise<Docker.Container> {
    this.container ??= this.docker.createContainer({
      name: `sbx-${this.spec.leaseId}-seed`,
      Image: this.spec.pinnedImage ?? this.spec.image,
      // Never started: an entrypoint only because the engine refuses a container without a command.
      Entrypoint: ['/nonexistent/sbx-image-source'],
      Cmd: [],
      Labels: { [LABEL.lease]: this.spec.leaseId, [LABEL.role]: 'seed', ...ownershipLabels(this.spec.ownership) },
      NetworkDisabled: true,
      HostConfig: { NetworkMode: 'none' },
    });
    return this.container;
  }

  /** Removes the source container if one was made (errors ignored: teardown reaps it by label). */
  async remove(): Promise<void> {
    const made = this.container;
    this.container = null;
    if (made === null) return;
    await made.then((c) => c.remove({ force: true })).catch(() => undefined);
  }
}

/** A directory name for an image ID (`sha256:<hex>` → `sha256-<hex>`). */
function idName(imageId: string): string {
  return imageId.replace(/[^A-Za-z0-9._-]/g, '-');
}
