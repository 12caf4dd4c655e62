/**
 * Checks an uploaded tar archive entry by entry before it reaches the sandbox, and rewrites it
 * for the sandbox: entries are rejected when their name is absolute, contains a `..` segment or NUL,
 * when a link points outside the upload's target directory, or when they are devices or FIFOs.
 * Accepted entries are re-emitted owned by the tool user, without setuid/setgid bits.
 *
 * Throws AppError `files.unsafe_entry` (details.entry names it) or `files.invalid_archive`.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { PassThrough, Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import { AppError } from '../../contract/errors.js';

export interface Owner {
  uid: number;
  gid: number;
  uname: string;
  gname: string;
}

export interface GuardSummary {
  entries: number;
  /** Bytes of regular-file content. */
  bytes: number;
}

const ALLOWED_TYPES = new Set(['file', 'directory', 'symlink', 'link', 'contiguous-file']);

/**
 * Why an entry is unsafe, or null when it stays inside the target. `links` holds the symlinks
 * the archive has created so far (normalized names): an entry may not pass through one, and a
 * link target may not resolve through one, because what a symlink points to on disk is not
 * what its text says lexically (`x -> .` then `esc -> x/..` is `/`'s parent, not `.`).
 * Pure; exported for unit tests.
 */
export function unsafeReason(
  type: string,
  name: string,
  linkname: string | null | undefined,
  links: ReadonlySet<string> = new Set(),
): string | null {
  if (!ALLOWED_TYPES.has(type)) return `entry type ${type} is not allowed`;
  if (name.includes('\0')) return 'name contains NUL';
  if (name.startsWith('/')) return 'absolute name';
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return 'name contains ".."';
  if (parts.length === 0 && type !== 'directory') return 'the archive root must be a directory';
  for (let i = 1; i < parts.length; i += 1) {
    const prefix = parts.slice(0, i).join('/');
    if (links.has(prefix)) return `name passes through the symlink ${prefix}`;
  }
  if (type === 'symlink' || type === 'link') {
    const target = linkname ?? '';
    if (target === '' || target.includes('\0')) return 'empty or invalid link target';
    if (target.startsWith('/')) return `link to absolute path ${target}`;
    // A symlink resolves against its own directory; a hard link names a path in the archive.
    const resolved = type === 'symlink' ? parts.slice(0, -1) : [];
    for (const step of target.split('/')) {
      if (step === '' || step === '.') continue;
      if (step === '..') {
        if (resolved.length === 0) return `link target ${target} is outside the target directory`;
        resolved.pop();
      } else {
        resolved.push(step);
        if (links.has(resolved.join('/'))) return `link target ${target} passes through the symlink ${resolved.join('/')}`;
      }
    }
  }
  return null;
}

/** Where the parser stands in the archive, for naming the place an archive goes wrong. */
interface Position {
  /** The entry whose data is being read, or null between entries. */
  current: { name: string; dataOffset: number; sizeBytes: number } | null;
  /** Offset of the next header block: the end of the last entry's padded data. */
  nextHeaderOffset: number;
  /** Name of the last entry read whole. */
  previous: string | null;
}

/** The part of a tar-stream entry stream the guard uses: `header.byteOffset` is where its data starts. */
type EntryStream = NodeJS.ReadableStream & { header: tar.Header & { byteOffset?: number } };

/** What `guardStream` does besides checking: report each entry, end the archive with a completion mark. */
export interface GuardOptions {
  /** Called with each accepted entry's normalized name and type (e.g. to find a build's Dockerfile). */
  onEntry?: (name: string, type: string) => void;
  /** Name of an empty regular file added after the last entry checked (contract/transfers.ts `TransferMark`). */
  mark?: string;
}

/**
 * Checks the tar arriving on `input` entry by entry and emits it rewritten on `archive`: each
 * entry leaves only after it passed, so a refused entry, and everything after it, never does.
 * On a refusal or a parse failure `archive` is destroyed with the error and `summary` rejects
 * with it: `files.unsafe_entry` (details.entry names it) or `files.invalid_archive` with
 * `details`: `entry` (the entry cut short, or the name field of the header that failed; null
 * when there is none), `offset` (byte offset in the body where it went wrong) and `reason` (the
 * parser's words); an AppError from `input` itself (a byte limit) as it is. Every stream has its
 * errors observed, so no archive, however broken, escapes as an uncaught error. One pass, in
 * memory bounded by the streams' buffers.
 */
export function guardStream(
  input: Readable,
  owner: Owner,
  options: GuardOptions = {},
): { archive: Readable; summary: Promise<GuardSummary> } {
  const extract = tar.extract();
  const pack = tar.pack();
  // A Node stream for the consumer (tar-stream's are streamx streams). Only the pack's bytes and
  // its end pass: its own error may be a parser's raw one, and the consumer is to get the
  // guard's verdict (the catch below destroys `archive` with it).
  const archive = new PassThrough({ highWaterMark: ARCHIVE_HIGH_WATER_MARK_BYTES });
  pack.on('data', (chunk) => {
    if (!archive.write(chunk as Buffer)) {
      pack.pause();
      archive.once('drain', () => pack.resume());
    }
  });
  pack.on('end', () => archive.end());
  pack.on('error', () => undefined);
  // The consumer gone: nothing more is packed.
  archive.once('close', () => pack.destroy());
  const recent = new RecentBytes();
  const reading = pipeline(input, recent.tap(), extract);
  // Observed from the start: it may fail while the loop below is still awaiting an entry, and a
  // rejection nobody listens to yet would end the process.
  const settled = reading.catch(() => undefined);
  const summary = (async (): Promise<GuardSummary> => {
    const done: GuardSummary = { entries: 0, bytes: 0 };
    const links = new Set<string>();
    const position: Position = { current: null, nextHeaderOffset: 0, previous: null };
    try {
      for await (const entry of extract as AsyncIterable<EntryStream>) {
        const { header } = entry;
        const reason = unsafeReason(header.type ?? 'file', header.name, header.linkname, links);
        if (reason)
          throw new AppError('files.unsafe_entry', `unsafe entry ${JSON.stringify(header.name)}: ${reason}`, {
            details: { entry: header.name, reason },
          });
        const sizeBytes = header.size ?? 0;
        const dataOffset = header.byteOffset ?? position.nextHeaderOffset + BLOCK;
        position.current = { name: header.name, dataOffset, sizeBytes };
        done.entries += 1;
        const normalized = header.name
          .split('/')
          .filter((p) => p !== '' && p !== '.')
          .join('/');
        options.onEntry?.(normalized, header.type ?? 'file');
        if (header.type === 'symlink') links.add(normalized);
        if (header.type === 'file' || header.type === 'contiguous-file') done.bytes += sizeBytes;
        await copyEntry(entry, pack, rewrite(header, owner));
        position.current = null;
        position.previous = header.name;
        position.nextHeaderOffset = dataOffset + Math.ceil(sizeBytes / BLOCK) * BLOCK;
      }
      await reading;
      if (options.mark !== undefined) pack.entry(markHeader(options.mark, owner), '');
      pack.finalize();
      return done;
    } catch (err) {
      extract.destroy();
      await settled;
      const failure = err instanceof AppError ? err : invalidArchive(err, position, recent);
      pack.destroy();
      archive.destroy(failure);
      throw failure;
    }
  })();
  // The consumer learns of a failure from `archive`; `summary` is observed so it never goes unhandled.
  summary.catch(() => undefined);
  return { archive, summary };
}

/**
 * Reads the tar at `inputPath`, checks every entry, writes the rewritten archive to
 * `outputPath`. Throws as `guardStream`.
 */
export async function guardArchive(
  inputPath: string,
  outputPath: string,
  owner: Owner,
  /** Called with each accepted entry's normalized name and type (e.g. to find a build's Dockerfile). */
  onEntry?: (name: string, type: string) => void,
): Promise<GuardSummary> {
  const { archive, summary } = guardStream(createReadStream(inputPath), owner, { onEntry });
  const [written] = await Promise.allSettled([pipeline(archive, createWriteStream(outputPath)), summary]);
  const result = await summary;
  if (written.status === 'rejected') throw written.reason;
  return result;
}

const BLOCK = 512;
/** What the rewritten archive may hold before the pack waits: a few of its 64 KiB reads, not one each. */
const ARCHIVE_HIGH_WATER_MARK_BYTES = 256 * 1024;

/** The header as the sandbox gets it: owned by the tool user, no setuid/setgid, no contiguous files. */
function rewrite(header: tar.Header, owner: Owner): tar.Header {
  return {
    ...header,
    type: header.type === 'contiguous-file' ? 'file' : header.type,
    mode: (header.mode ?? (header.type === 'directory' ? 0o755 : 0o644)) & 0o1777,
    uid: owner.uid,
    gid: owner.gid,
    uname: owner.uname,
    gname: owner.gname,
  };
}

/** The completion mark's header: an empty regular file of the tool user. */
function markHeader(name: string, owner: Owner): tar.Header {
  return { name, size: 0, mode: 0o600, mtime: new Date(), type: 'file', linkname: '', devmajor: 0, devminor: 0, ...owner };
}

/** Copies one entry's data into a new entry of `pack`; settles once the pack took it whole or either side failed. */
function copyEntry(entry: EntryStream, pack: tar.Pack, header: tar.Header): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const sink = pack.entry(header, (err) => (err ? reject(err) : resolve()));
    // A cut-short entry fails its source, then the sink and the pack with the same error: each
    // needs a listener, or the error escapes as uncaught and ends the process.
    sink.on('error', reject);
    entry.on('error', reject);
    entry.pipe(sink);
  });
}

/** `files.invalid_archive` naming where the archive broke. */
function invalidArchive(cause: unknown, position: Position, recent: RecentBytes): AppError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const truncated = /unexpected end/i.test(reason);
  // Truncated: the parser saw the whole body, so its end is the bytes read.
  const bodyBytes = recent.total;
  let entry: string | null;
  let offset: number;
  if (position.current) {
    entry = position.current.name;
    offset = truncated ? bodyBytes : position.current.dataOffset;
  } else {
    offset = truncated ? bodyBytes : position.nextHeaderOffset;
    entry = recent.nameFieldAt(position.nextHeaderOffset) ?? position.previous;
  }
  const where = entry === null ? `at byte ${offset}` : `at entry ${JSON.stringify(entry)}, byte ${offset}`;
  const why =
    position.current && truncated
      ? `it declares ${position.current.sizeBytes} bytes from byte ${position.current.dataOffset}, but the body ends at byte ${bodyBytes}`
      : reason;
  return new AppError('files.invalid_archive', `not a readable tar archive ${where}: ${why}`, {
    details: { entry, offset, reason },
    cause,
  });
}

/**
 * The body's bytes as they pass to the parser: how many so far, and the last RECENT_BYTES of
 * them, where the header a parse failed on is (the parser holds at most a block or two past it),
 * so its name can be named without keeping the body.
 */
class RecentBytes {
  total = 0;
  private chunks: Array<{ offset: number; bytes: Buffer }> = [];
  private kept = 0;

  tap(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _enc, cb) => {
        this.chunks.push({ offset: this.total, bytes: chunk });
        this.total += chunk.length;
        this.kept += chunk.length;
        while (this.chunks.length > 1 && this.kept - this.chunks[0]!.bytes.length >= RECENT_BYTES)
          this.kept -= this.chunks.shift()!.bytes.length;
        cb(null, chunk);
      },
    });
  }

  /** The name field (up to its first NUL) of the header block at `offset`, or null when it is empty or no longer kept. */
  nameFieldAt(offset: number): string | null {
    const field = Buffer.alloc(100);
    let got = 0;
    for (const { offset: at, bytes } of this.chunks) {
      const from = offset + got - at;
      if (from < 0 || from >= bytes.length) continue;
      got += bytes.copy(field, got, from, Math.min(bytes.length, from + field.length - got));
      if (got === field.length) break;
    }
    const end = field.subarray(0, got).indexOf(0);
    const name = field.subarray(0, end === -1 ? got : end).toString('utf8');
    return name === '' ? null : name;
  }
}

/** Bytes of the body RecentBytes keeps: far more than the parser reads ahead (64 KiB stream chunks). */
const RECENT_BYTES = 1024 * 1024;

/**
 * The content of regular file `name` (normalized, as `guardArchive` reports names) in the tar at
 * `path`, or null when the archive has no such file; at most `maxBytes` (more is an
 * `input.body_too_large`). For archives `guardArchive` already checked.
 */
export async function readArchiveFile(path: string, name: string, maxBytes: number): Promise<Buffer | null> {
  const extract = tar.extract();
  const reading = pipeline(createReadStream(path), extract);
  const settled = reading.catch(() => undefined);
  let found: Buffer | null = null;
  try {
    for await (const entry of extract as AsyncIterable<EntryStream>) {
      const normalized = entry.header.name
        .split('/')
        .filter((p) => p !== '' && p !== '.')
        .join('/');
      const wanted = normalized === name && (entry.header.type === 'file' || entry.header.type === 'contiguous-file');
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of entry as AsyncIterable<Buffer>) {
        if (!wanted) continue;
        size += chunk.length;
        if (size > maxBytes) throw new AppError('input.body_too_large', `${name} is over ${maxBytes} bytes`, { details: { maxBytes } });
        chunks.push(chunk);
      }
      if (wanted) found = Buffer.concat(chunks);
    }
    await reading;
    return found;
  } finally {
    extract.destroy();
    await settled;
  }
}
