/**
 * The `search` tool's built-in engine, for images without ripgrep: walks the tree itself (sorted,
 * depth-first, never through a symlink, skipping `.git` and, as ripgrep does by default, hidden
 * entries and binary files: a NUL in the first 8 KiB), and matches line by line with a
 * JavaScript RegExp (or the literal text). Differences from ripgrep, by design: no `.gitignore`
 * handling, and RegExp syntax (ECMAScript) instead of ripgrep's (Rust regex): the common subset
 * (classes, groups, alternation, anchors, `\b`, `\d`, `\w`, `\s`) is the same.
 */
import { open, lstat, readdir } from 'node:fs/promises';
import { posix } from 'node:path';
import picomatch from 'picomatch';
import type { SearchArgs } from '../../contract/tools.js';
import { ToolError } from './file-ops.js';

/** Entries the walker looks at before it stops (bounded time however large the tree). */
const MAX_VISITED = 200_000;
/** Largest file it reads, bytes; larger ones are skipped (ripgrep reads them, at its own pace). */
const MAX_FILE_BYTES = 16 * 1024 * 1024;
/** A match's text is cut to this many characters, like `rg --max-columns 2000`. */
const MAX_COLUMNS = 2000;

export interface WalkerMatch {
  path: string;
  line: number;
  text: string;
}

/**
 * Matches of `args` under the canonical directory `root`, at most `args.limit`, and whether the
 * walk stopped early (limit reached, or MAX_VISITED entries). Throws ToolError `input.invalid`
 * for a pattern RegExp cannot compile.
 */
export async function walkerSearch(
  root: string,
  args: SearchArgs,
  signal?: AbortSignal,
): Promise<{ matches: WalkerMatch[]; truncated: boolean }> {
  let pattern: RegExp;
  try {
    const source = args.literal ? args.pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') : args.pattern;
    pattern = new RegExp(source, args.ignoreCase ? 'i' : '');
  } catch (err) {
    throw new ToolError('input.invalid', `search failed: ${(err as Error).message}`);
  }
  const globMatch = args.glob ? picomatch(args.glob, { dot: true, basename: !args.glob.includes('/') }) : null;
  const matches: WalkerMatch[] = [];
  let visited = 0;
  let truncated = false;
  const searchFile = async (path: string): Promise<void> => {
    const handle = await open(path, 'r').catch(() => null);
    if (!handle) return;
    try {
      const { size } = await handle.stat();
      if (size > MAX_FILE_BYTES) return;
      const bytes = await handle.readFile();
      if (bytes.subarray(0, 8192).includes(0)) return;
      const lines = bytes.toString('utf8').split('\n');
      for (let i = 0; i < lines.length; i += 1) {
        if (!pattern.test(lines[i]!)) continue;
        if (matches.length >= args.limit) {
          truncated = true;
          return;
        }
        matches.push({ path, line: i + 1, text: lines[i]!.replace(/\r$/, '').slice(0, MAX_COLUMNS) });
      }
    } finally {
      await handle.close();
    }
  };
  const walk = async (dir: string, rel: string): Promise<void> => {
    const names = (await readdir(dir).catch(() => [] as string[])).sort();
    for (const name of names) {
      if (truncated || signal?.aborted) return;
      if (name.startsWith('.')) continue;
      if ((visited += 1) > MAX_VISITED) {
        truncated = true;
        return;
      }
      const path = posix.join(dir, name);
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const s = await lstat(path).catch(() => null);
      if (!s) continue;
      if (s.isDirectory()) await walk(path, relPath);
      else if (s.isFile() && (globMatch === null || globMatch(relPath))) await searchFile(path);
    }
  };
  const s = await lstat(root);
  if (s.isFile()) await searchFile(root);
  else await walk(root, '');
  return { matches, truncated };
}
