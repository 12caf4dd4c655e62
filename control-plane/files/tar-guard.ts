/**
 * Checks an uploaded tar archive before any byte reaches the sandbox, and rewrites it for the
 * sandbox: entries are rejected when their name is absolute, contains a `..` segment or NUL,
 * when a link points outside the upload's target directory, or when they are devices or FIFOs.
 * Accepted entries are re-emitted owned by the tool user, without setuid/setgid bits.
 *
 * Throws AppError `files.unsafe_entry` (details.entry names it) or `files.invalid_archive`.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
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

/**
 * Reads the tar at `inputPath`, checks every entry, writes the rewritten archive to `outputPath`.
 * Every stream has its errors observed, so no archive, however broken, escapes as an uncaught
 * error. A parse failure is `files.invalid_archive` with `details`: `entry` (the entry cut short,
 * or the name field of the header that failed; null when there is none), `offset` (byte offset
 * in the body where it went wrong) and `reason` (the parser's words).
 */
export async function guardArchive(
  inputPath: string,
  outputPath: string,
  owner: Owner,
  /** Called with each accepted entry's normalized name and type (e.g. to find a build's Dockerfile). */
  onEntry?: (name: string, type: string) => void,
): Promise<GuardSummary> {
  const bodyBytes = (await stat(inputPath)).size;
  const extract = tar.extract();
  const pack = tar.pack();
  const summary: GuardSummary = { entries: 0, bytes: 0 };
  const links = new Set<string>();
  const position: Position = { current: null, nextHeaderOffset: 0, previous: null };
  const reading = pipeline(createReadStream(inputPath), extract);
  const writing = pipeline(pack, createWriteStream(outputPath));
  // Observed from the start: either may fail while the loop below is still awaiting an entry,
  // and a rejection nobody listens to yet would end the process.
  const settled = Promise.allSettled([reading, writing]);
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
      summary.entries += 1;
      onEntry?.(
        header.name
          .split('/')
          .filter((p) => p !== '' && p !== '.')
          .join('/'),
        header.type ?? 'file',
      );
      if (header.type === 'symlink')
        links.add(
          header.name
            .split('/')
            .filter((p) => p !== '' && p !== '.')
            .join('/'),
        );
      if (header.type === 'file' || header.type === 'contiguous-file') summary.bytes += sizeBytes;
      await copyEntry(entry, pack, rewrite(header, owner));
      position.current = null;
      position.previous = header.name;
      position.nextHeaderOffset = dataOffset + Math.ceil(sizeBytes / BLOCK) * BLOCK;
    }
    await reading;
    pack.finalize();
    await writing;
    return summary;
  } catch (err) {
    extract.destroy();
    pack.destroy();
    await settled;
    if (err instanceof AppError) throw err;
    throw await invalidArchive(err, position, inputPath, bodyBytes);
  }
}

const BLOCK = 512;

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
async function invalidArchive(cause: unknown, position: Position, inputPath: string, bodyBytes: number): Promise<AppError> {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const truncated = /unexpected end/i.test(reason);
  let entry: string | null;
  let offset: number;
  if (position.current) {
    entry = position.current.name;
    offset = truncated ? bodyBytes : position.current.dataOffset;
  } else {
    offset = truncated ? bodyBytes : position.nextHeaderOffset;
    entry = (await headerName(inputPath, position.nextHeaderOffset)) ?? position.previous;
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

/** The name field of the header block at `offset` (up to its first NUL), or null when there is none. */
async function headerName(inputPath: string, offset: number): Promise<string | null> {
  const file = await open(inputPath, 'r');
  try {
    const field = Buffer.alloc(100);
    const { bytesRead } = await file.read(field, 0, field.length, offset);
    const end = field.subarray(0, bytesRead).indexOf(0);
    const name = field.subarray(0, end === -1 ? bytesRead : end).toString('utf8');
    return name === '' ? null : name;
  } finally {
    await file.close();
  }
}

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
