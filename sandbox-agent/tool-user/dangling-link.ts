/**
 * Finds the dangling symlink that makes a path unresolvable, so a file tool can say what is
 * wrong (`files.dangling_symlink`: the link and its target) instead of "not found" or "changed
 * during the call". Only asked after realpath(3) failed with ENOENT, so the common path pays
 * nothing.
 */
import { lstat, readlink, realpath } from 'node:fs/promises';
import { posix } from 'node:path';

/** A symlink whose target does not exist: `link` (absolute), `target` (its text), `resolved` (absolute). */
export interface DanglingLink {
  link: string;
  target: string;
  resolved: string;
}

/**
 * The first component of absolute `path` (the path itself included) that is a symlink whose
 * target does not exist, or null when there is none (then the path is simply missing).
 */
export async function danglingLinkOn(path: string): Promise<DanglingLink | null> {
  const parts = posix.normalize(path).split('/').filter(Boolean);
  for (let i = 1; i <= parts.length; i += 1) {
    const link = `/${parts.slice(0, i).join('/')}`;
    const s = await lstat(link).catch(() => null);
    if (!s) return null;
    if (!s.isSymbolicLink()) continue;
    if ((await realpath(link).catch(() => null)) !== null) continue;
    const target = await readlink(link).catch(() => null);
    if (target === null) return null;
    return { link, target, resolved: posix.resolve(posix.dirname(link), target) };
  }
  return null;
}
