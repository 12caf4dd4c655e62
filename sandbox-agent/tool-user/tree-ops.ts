/**
 * `remove`, `move`, `make_dir` and `stat` inside the tool-user worker (so the kernel applies the
 * tool user's permissions), on canonical paths inside the roots like the other file tools. They
 * act on a path's last component itself, never through it: the directory it is in is resolved
 * (realpath, symlinks followed) and checked against the roots, and the entry is then taken as it
 * is — a symlink is removed, moved or stat'ed as the link. A root itself is never removed or
 * moved (`files.root_protected`).
 *
 * The directory a remove or move works in is held open (file-ops' PinnedDir), so swapping a
 * directory on the path for a symlink during the call cannot send it elsewhere. A recursive
 * remove walks the tree without following symlinks (fs.rm). Each returns `{data, versions,
 * modelText}` or throws `ToolError`.
 */
import { cp, lstat, mkdir, open, readFile, readlink, realpath, rename, rm, rmdir, unlink } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { constants } from 'node:fs';
import { basename, dirname, join, posix } from 'node:path';
import type { MakeDirArgs, MoveArgs, RemoveArgs, StatArgs } from '../../contract/tools.js';
import {
  canonicalExisting,
  fsError,
  inside,
  outside,
  pinDirectory,
  sha256,
  ToolError,
  type FileContext,
  type OpResult,
  type PinnedDir,
} from './file-ops.js';

type EntryType = 'file' | 'directory' | 'symlink' | 'other';

const typeOf = (s: Stats): EntryType => (s.isSymbolicLink() ? 'symlink' : s.isDirectory() ? 'directory' : s.isFile() ? 'file' : 'other');

/** Where `path`'s last component is: its directory's realpath and its name; null when that directory does not exist. */
async function locate(path: string, ctx: FileContext): Promise<{ dir: string; name: string; full: string } | null> {
  const normalized = posix.normalize(path).replace(/(.)\/+$/, '$1');
  const dir = await realpath(dirname(normalized)).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw fsError(err, dirname(normalized));
  });
  if (dir === null) return null;
  const name = basename(normalized);
  const full = join(dir, name);
  if (!inside(full, ctx.roots)) throw outside(path, full, ctx.roots);
  return { dir, name, full };
}

function refuseRoot(full: string, path: string, ctx: FileContext, verb: string): void {
  if (ctx.roots.includes(full))
    throw new ToolError('files.root_protected', `${path} is the file root ${full}; a root cannot be ${verb}`, { path, resolved: full });
}

/** Runs `fn` with `dir` pinned. */
async function withDir<T>(dir: string, ctx: FileContext, fn: (pinned: PinnedDir) => Promise<T>): Promise<T> {
  const pinned = await pinDirectory(dir, ctx);
  try {
    return await fn(pinned);
  } finally {
    await pinned.close();
  }
}

/** sha256 of a regular file of at most `maxFileBytes` (the receipt's version), else null. */
async function versionOf(path: string, s: Stats | null, ctx: FileContext): Promise<string | null> {
  if (!s?.isFile() || s.size > ctx.maxFileBytes) return null;
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(() => null);
  if (!handle) return null;
  try {
    return sha256(await handle.readFile());
  } finally {
    await handle.close();
  }
}

export async function removeOp(args: RemoveArgs, ctx: FileContext): Promise<OpResult> {
  const where = await locate(args.path, ctx);
  const missing = (shown: string): OpResult => ({
    data: { path: shown, existed: false, type: null, recursive: args.recursive },
    versions: [],
    modelText: `${shown} did not exist; nothing removed`,
  });
  if (!where) return missing(args.path);
  refuseRoot(where.full, args.path, ctx, 'removed');
  return withDir(where.dir, ctx, async (dir) => {
    const target = join(dir.path, where.name);
    const s = await lstat(target).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw fsError(err, where.full);
    });
    if (!s) return missing(where.full);
    const type = typeOf(s);
    const before = await versionOf(target, s, ctx);
    try {
      if (type !== 'directory') await unlink(target);
      else if (args.recursive) await rm(target, { recursive: true, force: false });
      else await rmdir(target);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTEMPTY' || code === 'EEXIST')
        throw new ToolError('files.not_empty', `${where.full} is a directory with entries; pass recursive to remove it all`, {
          path: where.full,
        });
      throw fsError(err, where.full);
    }
    await dir.sync();
    return {
      data: { path: where.full, existed: true, type, recursive: args.recursive },
      versions: type === 'file' ? [{ path: where.full, before, after: null }] : [],
      modelText: `removed ${type} ${where.full}`,
    };
  });
}

/**
 * The canonical directory `path` would be created in, made (with missing parents) after its
 * nearest existing ancestor passed the roots check.
 */
async function ensureDirectory(path: string, ctx: FileContext, mode?: number): Promise<{ dir: string; created: string[] }> {
  let ancestor = path;
  const missing: string[] = [];
  while (!(await realpath(ancestor).catch(() => null))) {
    missing.unshift(basename(ancestor));
    ancestor = dirname(ancestor);
  }
  const base = await canonicalExisting(ancestor, ctx);
  const created: string[] = [];
  let current = base;
  for (const name of missing) {
    current = join(current, name);
    if (!inside(current, ctx.roots)) throw outside(path, current, ctx.roots);
    await mkdir(current, { mode: mode ?? 0o755 }).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw fsError(err, current);
    });
    created.push(current);
  }
  // Made or not, what is there now must still resolve inside the roots (a racing symlink).
  return { dir: await canonicalExisting(current, ctx), created };
}

export async function makeDirOp(args: MakeDirArgs, ctx: FileContext): Promise<OpResult> {
  const where = await locate(args.path, ctx);
  if (where) {
    const s = await lstat(where.full).catch(() => null);
    if (s) {
      // An existing directory (or a link to one inside the roots) is what was asked for.
      // A link is followed here (mkdir -p does): out of the roots or dangling, it says so.
      const real = s.isSymbolicLink() ? await canonicalExisting(where.full, ctx) : where.full;
      const isDir = s.isDirectory() || (await lstat(real).catch(() => null))?.isDirectory() === true;
      if (!isDir) throw new ToolError('files.exists', `${where.full} exists and is not a directory`, { path: where.full, type: typeOf(s) });
      return { data: { path: real, created: false, createdDirs: [] }, versions: [], modelText: `${where.full} exists` };
    }
  } else if (!args.parents) {
    throw new ToolError('files.not_found', `the parent of ${args.path} does not exist (pass parents: true)`, { path: args.path });
  }
  const normalized = posix.normalize(args.path).replace(/(.)\/+$/, '$1');
  const { dir, created } = await ensureDirectory(normalized, ctx, args.mode);
  return {
    data: { path: dir, created: created.length > 0, createdDirs: created },
    versions: [],
    modelText: created.length > 0 ? `created ${created.join(', ')}` : `${dir} exists`,
  };
}

export async function moveOp(args: MoveArgs, ctx: FileContext): Promise<OpResult> {
  const from = await locate(args.path, ctx);
  if (!from) throw new ToolError('files.not_found', `no such file or directory: ${args.path}`, { path: args.path });
  refuseRoot(from.full, args.path, ctx, 'moved');
  const destination = posix.normalize(args.destination).replace(/(.)\/+$/, '$1');
  // Into itself, by its canonical name: refused before any missing parent is made.
  if (destination === from.full || destination.startsWith(`${from.full}/`))
    throw new ToolError('input.invalid', `cannot move ${from.full} into itself (${destination})`, { path: from.full, destination });
  // Missing parents of the destination are made, as write_file makes a file's.
  const toDir = (await locate(destination, ctx)) ?? (await ensureDirectory(dirname(destination), ctx), await locate(destination, ctx));
  if (!toDir) throw new ToolError('files.not_found', `the directory of ${args.destination} does not exist`, { path: args.destination });
  refuseRoot(toDir.full, args.destination, ctx, 'replaced');
  if (toDir.full === from.full || toDir.full.startsWith(`${from.full}/`))
    throw new ToolError('input.invalid', `cannot move ${from.full} into itself (${toDir.full})`, {
      path: from.full,
      destination: toDir.full,
    });
  return withDir(from.dir, ctx, (src) =>
    withDir(toDir.dir, ctx, async (dst) => {
      const source = join(src.path, from.name);
      const target = join(dst.path, toDir.name);
      const s = await lstat(source).catch((err: unknown) => {
        throw fsError(err, from.full);
      });
      const existing = await lstat(target).catch(() => null);
      if (existing && !args.overwrite)
        throw new ToolError('files.exists', `${toDir.full} exists; pass overwrite to replace it; nothing moved`, {
          path: toDir.full,
          type: typeOf(existing),
        });
      const type = typeOf(s);
      const before = await versionOf(source, s, ctx);
      const replaced = existing ? await versionOf(target, existing, ctx) : null;
      let atomic = true;
      try {
        await rename(source, target);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'EXDEV') throw moveError(err, from.full, toDir.full);
        // Another filesystem (/workspace to /tmp): copy, then remove the source. Not atomic.
        atomic = false;
        if (existing?.isDirectory()) await rmdir(target).catch((e: unknown) => Promise.reject(moveError(e, from.full, toDir.full)));
        await cp(source, target, {
          recursive: true,
          force: true,
          errorOnExist: false,
          preserveTimestamps: true,
          verbatimSymlinks: true,
        }).catch((e: unknown) => Promise.reject(moveError(e, from.full, toDir.full)));
        await rm(source, { recursive: true, force: true }).catch((e: unknown) => Promise.reject(fsError(e, from.full)));
      }
      await Promise.all([src.sync(), dst.sync()]);
      const versions =
        type === 'file'
          ? [
              { path: from.full, before, after: null },
              { path: toDir.full, before: replaced, after: before },
            ]
          : [];
      return {
        data: { path: from.full, destination: toDir.full, type, replaced: existing !== null, atomic },
        versions,
        modelText: `moved ${type} ${from.full} to ${toDir.full}${existing ? ' (replaced)' : ''}`,
      };
    }),
  );
}

function moveError(err: unknown, from: string, to: string): ToolError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOTEMPTY' || code === 'EEXIST')
    return new ToolError('files.not_empty', `${to} is a directory with entries; nothing moved`, { path: to, from });
  if (code === 'EISDIR' || code === 'ENOTDIR')
    return new ToolError('files.not_a_file', `${code}: cannot replace ${to} with ${from} (a directory and a non-directory)`, {
      path: to,
      from,
      errno: code,
    });
  return fsError(err, code === 'ENOENT' ? from : to);
}

/** Names by id from an /etc/passwd- or /etc/group-style file (name:x:id:...); empty when unreadable. */
async function namesById(file: string): Promise<Map<number, string>> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const names = new Map<number, string>();
  for (const line of text.split('\n')) {
    const [name, , id] = line.split(':');
    if (name && id && /^\d+$/.test(id) && !names.has(Number(id))) names.set(Number(id), name);
  }
  return names;
}

/** `rwxr-xr-x` of permission bits, with s/S and t/T as ls(1) shows them. */
function permissionString(mode: number): string {
  const bit = (mask: number, c: string): string => (mode & mask ? c : '-');
  const special = (exec: boolean, set: boolean, lower: string): string => (set ? (exec ? lower : lower.toUpperCase()) : exec ? 'x' : '-');
  return [
    bit(0o400, 'r'),
    bit(0o200, 'w'),
    special((mode & 0o100) !== 0, (mode & 0o4000) !== 0, 's'),
    bit(0o040, 'r'),
    bit(0o020, 'w'),
    special((mode & 0o010) !== 0, (mode & 0o2000) !== 0, 's'),
    bit(0o004, 'r'),
    bit(0o002, 'w'),
    special((mode & 0o001) !== 0, (mode & 0o1000) !== 0, 't'),
  ].join('');
}

export async function statOp(args: StatArgs, ctx: FileContext): Promise<OpResult> {
  const where = await locate(args.path, ctx);
  if (!where) throw new ToolError('files.not_found', `no such file or directory: ${args.path}`, { path: args.path });
  const s = await lstat(where.full).catch((err: unknown) => {
    throw fsError(err, where.full);
  });
  const [users, groups] = await Promise.all([namesById('/etc/passwd'), namesById('/etc/group')]);
  const type = typeOf(s);
  const target = type === 'symlink' ? await readlink(where.full).catch(() => null) : null;
  const data = {
    path: where.full,
    type,
    sizeBytes: s.size,
    mode: s.mode & 0o7777,
    permissions: permissionString(s.mode),
    uid: s.uid,
    gid: s.gid,
    owner: users.get(s.uid) ?? String(s.uid),
    group: groups.get(s.gid) ?? String(s.gid),
    mtime: s.mtime.toISOString(),
    mtimeMs: Math.trunc(s.mtimeMs),
    symlinkTarget: target,
  };
  const modeText = (s.mode & 0o7777).toString(8).padStart(4, '0');
  return {
    data,
    versions: [],
    modelText: `${where.full}: ${type}, ${s.size} bytes, ${modeText} ${data.owner}:${data.group}, mtime ${data.mtime}${target !== null ? `, -> ${target}` : ''}`,
  };
}
