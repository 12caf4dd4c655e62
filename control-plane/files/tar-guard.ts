/**
 * Checks an uploaded tar archive before any byte reaches the sandbox, and rewrites it for the
 * sandbox: entries are rejected when their name is absolute, contains a `..` segment or NUL,
 * when a link points outside the upload's target directory, or when they are devices or FIFOs.
 * Accepted entries are re-emitted owned by the tool user, without setuid/setgid bits.
 *
 * Throws AppError `files.unsafe_entry` (details.entry names it) or `files.invalid_archive`.
 */
import { createReadStream, createWriteStream } from 'node:fs';
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
export function unsafeReason(type: string, name: string, linkname: string | null | undefined, links: ReadonlySet<string> = new Set()): string | null {
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

/** Reads the tar at `inputPath`, checks every entry, writes the rewritten archive to `outputPath`. */
export async function guardArchive(inputPath: string, outputPath: string, owner: Owner): Promise<GuardSummary> {
  const extract = tar.extract();
  const pack = tar.pack();
  const summary: GuardSummary = { entries: 0, bytes: 0 };
  const links = new Set<string>();
  extract.on('entry', (header, stream, next) => {
    // An entry stream fails with the archive's own error, which the extract pipeline reports.
    stream.on('error', () => undefined);
    const reason = unsafeReason(header.type ?? 'file', header.name, header.linkname, links);
    if (reason) {
      stream.resume();
      extract.destroy(new AppError('files.unsafe_entry', `unsafe entry ${JSON.stringify(header.name)}: ${reason}`, { details: { entry: header.name, reason } }));
      return;
    }
    summary.entries += 1;
    if (header.type === 'symlink') links.add(header.name.split('/').filter((p) => p !== '' && p !== '.').join('/'));
    if (header.type === 'file' || header.type === 'contiguous-file') summary.bytes += header.size ?? 0;
    const rewritten: tar.Header = {
      ...header,
      type: header.type === 'contiguous-file' ? 'file' : header.type,
      mode: (header.mode ?? (header.type === 'directory' ? 0o755 : 0o644)) & 0o1777,
      uid: owner.uid,
      gid: owner.gid,
      uname: owner.uname,
      gname: owner.gname,
    };
    const entry = pack.entry(rewritten, (err) => (err ? extract.destroy(err) : next()));
    stream.pipe(entry);
  });
  extract.on('finish', () => pack.finalize());
  extract.on('error', (err) => pack.destroy(err));
  // Both sides settle before deciding: a rejected entry fails the reading side first and then
  // the writing side with the same error, and neither rejection may go unobserved.
  const [read, write] = await Promise.allSettled([pipeline(createReadStream(inputPath), extract), pipeline(pack, createWriteStream(outputPath))]);
  const failure = read.status === 'rejected' ? read.reason : write.status === 'rejected' ? write.reason : null;
  if (failure === null) return summary;
  if (failure instanceof AppError) throw failure;
  throw new AppError('files.invalid_archive', `not a readable tar archive: ${(failure as Error).message}`, { cause: failure });
}
