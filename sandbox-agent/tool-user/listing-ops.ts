/**
 * The tools that walk a tree without changing it, `list_files` and `glob`, inside the
 * tool-user worker: bounded in entries and depth, never following a symlink, so a link cannot
 * lead them out of the roots. Each returns `{data, versions, modelText}` or throws `ToolError`.
 */
import { lstat, opendir, readlink } from 'node:fs/promises';
import { posix } from 'node:path';
import picomatch from 'picomatch';
import type { GlobArgs, ListFilesArgs } from '../../contract/tools.js';
import { canonicalExisting, fsError, type FileContext, type OpResult } from './file-ops.js';

type EntryType = 'file' | 'directory' | 'symlink' | 'other';

export async function listFilesOp(args: ListFilesArgs, ctx: FileContext): Promise<OpResult> {
  const root = await canonicalExisting(args.path, ctx);
  const entries: Array<{ path: string; type: EntryType; size: number; target?: string }> = [];
  let truncated = false;
  const walk = async (dir: string, depth: number): Promise<void> => {
    const { names, complete } = await readNames(dir, LIST_MAX_DIR_ENTRIES);
    if (!complete) truncated = true;
    for (const name of names) {
      if (entries.length >= args.limit) {
        truncated = true;
        return;
      }
      const path = posix.join(dir, name);
      const s = await lstat(path).catch(() => null);
      if (!s) continue;
      const type: EntryType = s.isSymbolicLink() ? 'symlink' : s.isDirectory() ? 'directory' : s.isFile() ? 'file' : 'other';
      const entry: (typeof entries)[number] = { path, type, size: s.size };
      if (type === 'symlink') entry.target = await readlinkSafe(path);
      entries.push(entry);
      // Symlinks are listed, never followed: a link cannot lead the listing out of the roots.
      if (type === 'directory' && depth > 1) await walk(path, depth - 1);
      if (truncated) return;
    }
  };
  await walk(root, args.depth);
  return {
    data: { path: root, entries, truncated },
    versions: [],
    modelText: `${entries.map((e) => `${e.path}${e.type === 'directory' ? '/' : e.type === 'symlink' ? ` -> ${e.target}` : ''}`).join('\n')}${truncated ? `\n[truncated at ${args.limit} entries]` : ''}`,
  };
}

/** Names of one directory a listing reads at most (bounds memory on a huge directory). */
const LIST_MAX_DIR_ENTRIES = 100_000;

/** Up to `max` names of `dir`, sorted; `complete` is false when the directory had more. */
async function readNames(dir: string, max: number): Promise<{ names: string[]; complete: boolean }> {
  const handle = await opendir(dir).catch((err: unknown) => {
    throw fsError(err, dir);
  });
  const names: string[] = [];
  let complete = true;
  for await (const entry of handle) {
    if (names.length >= max) {
      complete = false;
      break;
    }
    names.push(entry.name);
  }
  return { names: names.sort(), complete };
}

async function readlinkSafe(path: string): Promise<string> {
  return readlink(path).catch(() => '?');
}

/** Entries a `glob` looks at before it gives up (bounds the time and memory of a huge tree). */
const GLOB_MAX_VISITED = 200_000;
/** Directory levels a `glob` descends at most. */
const GLOB_MAX_DEPTH = 64;

/**
 * Walks the tree under `path` itself (sorted, depth-first, never through a symlink) and keeps
 * relative paths that match the pattern (picomatch syntax, dotfiles included), stopping once it
 * has `limit` matches or has looked at GLOB_MAX_VISITED entries: bounded in time and memory
 * however large the tree, and unable to leave it (a pattern like `../x` or `link/*` matches
 * nothing outside or behind a symlink).
 */
export async function globOp(args: GlobArgs, ctx: FileContext): Promise<OpResult> {
  const root = await canonicalExisting(args.path, ctx);
  const isMatch = picomatch(args.pattern, { dot: true });
  const paths: string[] = [];
  let visited = 0;
  let truncated = false;
  const walk = async (dir: string, rel: string, depth: number): Promise<void> => {
    const { names, complete } = await readNames(dir, GLOB_MAX_VISITED).catch(() => ({ names: [] as string[], complete: true }));
    if (!complete) truncated = true;
    for (const name of names) {
      if (paths.length >= args.limit || visited >= GLOB_MAX_VISITED) {
        truncated = true;
        return;
      }
      visited += 1;
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const s = await lstat(posix.join(dir, name)).catch(() => null);
      if (!s) continue;
      if (isMatch(relPath)) paths.push(posix.join(root, relPath));
      if (s.isDirectory()) {
        if (depth < GLOB_MAX_DEPTH) await walk(posix.join(dir, name), relPath, depth + 1);
        else truncated = true;
      }
      if (truncated) return;
    }
  };
  await walk(root, '', 1);
  return {
    data: { path: root, pattern: args.pattern, paths, truncated },
    versions: [],
    modelText: paths.join('\n') + (truncated ? `\n[truncated: ${paths.length} matches, ${visited} entries looked at]` : ''),
  };
}
