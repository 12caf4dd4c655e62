/**
 * The file tools' operations. They run inside the tool-user worker, i.e. with the tool user's
 * uid and gid, so the kernel applies that user's permissions; on top, every path is
 * canonicalized (realpath: `..` and symlinks resolved) and must lie inside the lease's file
 * roots — the policy decides on the resolved target, never on the string the caller sent.
 *
 * Each operation returns `{data, versions, modelText}` or throws `ToolError` with a catalogue code.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, readlink, realpath, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { createTwoFilesPatch } from 'diff';
import type { ErrorCode } from '../../contract/errors.js';
import type { EditFileArgs, ReadFileArgs, WriteFileArgs } from '../../contract/tools.js';
import { danglingLinkOn } from './dangling-link.js';

export class ToolError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export interface FileContext {
  /** Canonical absolute directories the file tools may reach. */
  roots: readonly string[];
  /** Largest file a tool reads or writes, bytes. */
  maxFileBytes: number;
}

export interface OpResult {
  data: Record<string, unknown>;
  versions: Array<{ path: string; before: string | null; after: string | null }>;
  modelText: string;
}

/**
 * Bytes of unified diff an operation returns at most; the agent keeps a head of it in the
 * result and sends the whole (up to this) as an artifact.
 */
export const MAX_DIFF_BYTES = 16 * 1024 * 1024;

export const sha256 = (data: Uint8Array): string => createHash('sha256').update(data).digest('hex');

/** Whether a canonical path is one of the roots or below one. */
export function inside(path: string, roots: readonly string[]): boolean {
  return roots.some((r) => path === r || path.startsWith(`${r}/`));
}

/** `input.path_outside_workspace` for `path`, which resolves to `canonical`. */
export function outside(path: string, canonical: string, roots: readonly string[]): ToolError {
  return new ToolError('input.path_outside_workspace', `${path} resolves to ${canonical}, outside the file roots (${roots.join(', ')})`, {
    path,
    resolved: canonical,
    roots,
  });
}

/** A file system error as the catalogue's `files.*` code for `path`. */
export function fsError(err: unknown, path: string): ToolError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return new ToolError('files.not_found', `no such file or directory: ${path}`, { path });
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS')
    return new ToolError('files.permission_denied', `${code}: the tool user may not access ${path}`, { path, errno: code });
  if (code === 'ENOSPC') return new ToolError('files.no_space', `no space left writing ${path}`, { path });
  if (code === 'EISDIR' || code === 'ENOTDIR') return new ToolError('files.not_a_file', `${code}: ${path}`, { path, errno: code });
  return new ToolError('files.transfer_failed', `${code ?? 'error'}: ${(err as Error).message}`, { path, errno: code });
}

/** `files.dangling_symlink` when a dangling symlink on `path` is why it does not resolve, else null. */
async function danglingError(path: string): Promise<ToolError | null> {
  const found = await danglingLinkOn(path);
  if (!found) return null;
  return new ToolError('files.dangling_symlink', `${found.link} is a symlink to ${found.target}, which does not exist`, { path, ...found });
}

/** realpath of an existing path, checked against the roots. */
export async function canonicalExisting(path: string, ctx: FileContext): Promise<string> {
  const canonical = await realpath(path).catch(async (err: unknown) => {
    throw ((err as NodeJS.ErrnoException).code === 'ENOENT' && (await danglingError(path))) || fsError(err, path);
  });
  if (!inside(canonical, ctx.roots)) throw outside(path, canonical, ctx.roots);
  return canonical;
}

/**
 * Where a write to `path` lands: the realpath of the file if it exists (a symlink is written
 * through, to its target, which must be inside the roots too), else realpath(dir)/name, the
 * missing directories created first (after their nearest existing ancestor passed the check).
 */
async function canonicalForWrite(path: string, ctx: FileContext): Promise<string> {
  const existing = await realpath(path).catch(() => null);
  if (existing) {
    if (!inside(existing, ctx.roots)) throw outside(path, existing, ctx.roots);
    return existing;
  }
  // A write through a dangling link would create a file where the link points; say so instead.
  const dangling = await danglingError(path);
  if (dangling) throw dangling;
  let ancestor = dirname(path);
  const missing: string[] = [];
  while (!(await realpath(ancestor).catch(() => null))) {
    missing.unshift(basename(ancestor));
    ancestor = dirname(ancestor);
  }
  const base = await canonicalExisting(ancestor, ctx);
  const dir = join(base, ...missing);
  if (missing.length > 0) {
    await mkdir(dir, { recursive: true }).catch((err: unknown) => {
      throw fsError(err, dir);
    });
  }
  const canonical = join(await canonicalExisting(dir, ctx), basename(path));
  if (!inside(canonical, ctx.roots)) throw outside(path, canonical, ctx.roots);
  return canonical;
}

/**
 * A directory held open, so the operation acts on the directory it checked even if the path is
 * swapped for a symlink a moment later (a race the sandbox's own code can run): `path` goes
 * through /proc/self/fd (proc(5): a magic link to the open directory itself), and `real` is
 * where that directory is, checked against the roots.
 */
export interface PinnedDir {
  path: string;
  real: string;
  sync(): Promise<void>;
  close(): Promise<void>;
}

/** Opens `dir` as a PinnedDir; throws `input.path_outside_workspace` when it is outside the roots. */
export async function pinDirectory(dir: string, ctx: FileContext): Promise<PinnedDir> {
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY).catch((err: unknown) => {
    throw fsError(err, dir);
  });
  const path = `/proc/self/fd/${handle.fd}`;
  const real = await readlink(path);
  if (!inside(real, ctx.roots)) {
    await handle.close();
    throw outside(dir, real, ctx.roots);
  }
  return { path, real, sync: () => handle.sync(), close: () => handle.close() };
}

/** Runs `fn` with the file's directory pinned (see PinnedDir) and its name in it. */
async function withPinnedFile<T>(canonical: string, ctx: FileContext, fn: (dir: PinnedDir, name: string) => Promise<T>): Promise<T> {
  const dir = await pinDirectory(dirname(canonical), ctx);
  try {
    return await fn(dir, basename(canonical));
  } finally {
    await dir.close();
  }
}

/**
 * The bytes and mode of `name` in a pinned directory, or null when it does not exist. Opened
 * with O_NOFOLLOW: a symlink swapped in for the file is refused, not followed. Throws for
 * non-regular files and size.
 */
async function readRegular(dir: PinnedDir, name: string, ctx: FileContext): Promise<{ bytes: Buffer; mode: number } | null> {
  const shown = join(dir.real, name);
  const handle = await open(join(dir.path, name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(
    (err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      if ((err as NodeJS.ErrnoException).code === 'ELOOP')
        throw new ToolError('files.not_a_file', `${shown} is a symlink (it changed during the call)`, { path: shown });
      throw fsError(err, shown);
    },
  );
  if (!handle) return null;
  try {
    const s = await handle.stat();
    if (!s.isFile()) throw new ToolError('files.not_a_file', `not a regular file: ${shown}`, { path: shown });
    if (s.size > ctx.maxFileBytes)
      throw new ToolError('files.too_large', `${shown} is ${s.size} bytes, above the limit of ${ctx.maxFileBytes}`, {
        path: shown,
        bytes: s.size,
        maxBytes: ctx.maxFileBytes,
      });
    return { bytes: await handle.readFile(), mode: s.mode & 0o777 };
  } finally {
    await handle.close();
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Text if the bytes are valid UTF-8 without NUL, else null (binary). */
export function decodeText(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

/** Lines with their own endings kept (`\n` or `\r\n`); a final line may lack one. */
export function splitLines(text: string): string[] {
  if (text === '') return [];
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

export async function readFileOp(args: ReadFileArgs, ctx: FileContext): Promise<OpResult> {
  const found = await withPinnedFile(await canonicalExisting(args.path, ctx), ctx, async (dir, name) => ({
    canonical: join(dir.real, name),
    file: await readRegular(dir, name, ctx),
  }));
  const { canonical } = found;
  if (!found.file) throw new ToolError('files.not_found', `no such file: ${args.path}`, { path: args.path });
  const bytes = found.file.bytes;
  const digest = sha256(bytes);
  const versions = [{ path: canonical, before: digest, after: digest }];
  if (args.encoding === 'base64') {
    return {
      data: { path: canonical, encoding: 'base64', content: bytes.toString('base64'), sha256: digest, totalBytes: bytes.length },
      versions,
      modelText: `${canonical}: ${bytes.length} bytes (base64)`,
    };
  }
  const text = decodeText(bytes);
  if (text === null)
    throw new ToolError('files.binary', `${canonical} is binary (NUL bytes or invalid UTF-8); read it with encoding: base64`, {
      path: canonical,
      bytes: bytes.length,
      sha256: digest,
    });
  const lines = splitLines(text);
  const start = Math.min(args.offset - 1, lines.length);
  const end = Math.min(lines.length, start + args.limit);
  const truncated = start > 0 || end < lines.length;
  const content = lines.slice(start, end).join('');
  if (start === lines.length && lines.length > 0 && args.offset > lines.length) {
    throw new ToolError('input.invalid', `offset ${args.offset} is past the end of ${canonical} (${lines.length} lines)`, {
      path: canonical,
      totalLines: lines.length,
    });
  }
  return {
    data: {
      path: canonical,
      encoding: 'utf8',
      content,
      sha256: digest,
      totalLines: lines.length,
      totalBytes: bytes.length,
      fromLine: Math.min(args.offset, lines.length + 1),
      toLine: end,
      truncated,
      remaining: end < lines.length ? { fromLine: end + 1, toLine: lines.length } : null,
    },
    versions,
    modelText: truncated ? `${canonical} lines ${args.offset}-${end} of ${lines.length}:\n${content}` : content,
  };
}

/**
 * Writes `bytes` as `name` in a pinned directory atomically: a temp file beside it, fsync,
 * rename over the target (rename(2) is atomic within a filesystem), fsync of the directory so
 * the rename itself survives a crash. Temp file and rename both go through the pinned
 * directory, so a swapped path cannot send them elsewhere.
 */
async function atomicWrite(dir: PinnedDir, name: string, bytes: Uint8Array, mode: number): Promise<void> {
  // A fixed-length name: the file's own name may already be near NAME_MAX (255 bytes).
  const temp = join(dir.path, `.sbx-${randomBytes(8).toString('hex')}.tmp`);
  try {
    const handle = await open(temp, 'wx', mode);
    try {
      await handle.writeFile(bytes);
      await handle.chmod(mode);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, join(dir.path, name));
    await dir.sync();
  } catch (err) {
    await rm(temp, { force: true }).catch(() => undefined);
    throw fsError(err, join(dir.real, name));
  }
}

function unifiedDiff(path: string, before: string, after: string): { diff: string; diffTruncated: boolean } {
  const full = createTwoFilesPatch(path, path, before, after, 'before', 'after');
  const bytes = Buffer.byteLength(full);
  if (bytes <= MAX_DIFF_BYTES) return { diff: full, diffTruncated: false };
  return { diff: Buffer.from(full).subarray(0, MAX_DIFF_BYTES).toString('utf8'), diffTruncated: true };
}

async function checkExpected(expected: string | undefined, actual: string | null, path: string): Promise<void> {
  if (expected !== undefined && expected !== actual) {
    throw new ToolError('files.conflict', `${path} changed: expected sha256 ${expected}, found ${actual ?? 'no file'}; nothing written`, {
      path,
      expected,
      actual,
    });
  }
}

export async function writeFileOp(args: WriteFileArgs, ctx: FileContext): Promise<OpResult> {
  const bytes = args.encoding === 'base64' ? Buffer.from(args.content, 'base64') : Buffer.from(args.content, 'utf8');
  if (bytes.length > ctx.maxFileBytes)
    throw new ToolError('files.too_large', `content is ${bytes.length} bytes, above the limit of ${ctx.maxFileBytes}`, {
      bytes: bytes.length,
      maxBytes: ctx.maxFileBytes,
    });
  const { canonical, existing } = await withPinnedFile(await canonicalForWrite(args.path, ctx), ctx, async (dir, name) => {
    const canonical = join(dir.real, name);
    const existing = await readRegular(dir, name, ctx);
    const before = existing ? sha256(existing.bytes) : null;
    if (existing && args.createOnly)
      throw new ToolError('files.exists', `${canonical} exists (createOnly); nothing written`, { path: canonical, sha256: before });
    await checkExpected(args.expectedSha256, before, canonical);
    await atomicWrite(dir, name, bytes, existing ? existing.mode : (args.mode ?? 0o644));
    return { canonical, existing: existing?.bytes ?? null };
  });
  const before = existing ? sha256(existing) : null;
  const after = sha256(bytes);
  const oldText = existing ? decodeText(existing) : '';
  const newText = decodeText(bytes);
  const diff = oldText !== null && newText !== null ? unifiedDiff(canonical, oldText, newText) : { diff: null, diffTruncated: false };
  return {
    data: { path: canonical, bytes: bytes.length, sha256: after, created: !existing, ...diff },
    versions: [{ path: canonical, before, after }],
    modelText: `${existing ? 'wrote' : 'created'} ${canonical} (${bytes.length} bytes)`,
  };
}

export async function editFileOp(args: EditFileArgs, ctx: FileContext): Promise<OpResult> {
  return withPinnedFile(await canonicalExisting(args.path, ctx), ctx, (dir, name) => editPinned(args, ctx, dir, name));
}

async function editPinned(args: EditFileArgs, ctx: FileContext, dir: PinnedDir, name: string): Promise<OpResult> {
  const canonical = join(dir.real, name);
  const file = await readRegular(dir, name, ctx);
  if (!file) throw new ToolError('files.not_found', `no such file: ${args.path}`, { path: args.path });
  const existing = file.bytes;
  const before = sha256(existing);
  await checkExpected(args.expectedSha256, before, canonical);
  const text = decodeText(existing);
  if (text === null) throw new ToolError('files.binary', `${canonical} is binary; edit_file works on text`, { path: canonical });
  const bom = text.startsWith('\uFEFF') ? '\uFEFF' : '';
  const body = text.slice(bom.length);
  // A file that is CRLF throughout is edited in LF form (oldString and newString too) and written
  // back CRLF, so an edit written with '\n' matches and new lines get the file's ending.
  const crlf = body.includes('\r\n') && !/(^|[^\r])\n/.test(body);
  const toLf = (s: string): string => (crlf ? s.replace(/\r\n/g, '\n') : s);
  const normalized = toLf(body);
  const oldString = toLf(args.oldString);
  const newString = toLf(args.newString);
  const count = normalized.split(oldString).length - 1;
  if (count === 0) throw new ToolError('edit.no_match', `oldString does not occur in ${canonical}`, { path: canonical, count });
  if (count > 1 && !args.replaceAll)
    throw new ToolError('edit.ambiguous_match', `oldString occurs ${count} times in ${canonical}; make it unique or set replaceAll`, {
      path: canonical,
      count,
    });
  const replaced = normalized.split(oldString).join(newString);
  const output = bom + (crlf ? replaced.replace(/\n/g, '\r\n') : replaced);
  const bytes = Buffer.from(output, 'utf8');
  if (bytes.length > ctx.maxFileBytes)
    throw new ToolError('files.too_large', `the edited file would be ${bytes.length} bytes, above ${ctx.maxFileBytes}`, {
      path: canonical,
    });
  await atomicWrite(dir, name, bytes, file.mode);
  const after = sha256(bytes);
  return {
    data: { path: canonical, replacements: count, sha256: after, ...unifiedDiff(canonical, text, output) },
    versions: [{ path: canonical, before, after }],
    modelText: `edited ${canonical}: ${count} replacement${count === 1 ? '' : 's'}`,
  };
}
