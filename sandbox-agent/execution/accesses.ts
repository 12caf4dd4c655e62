/**
 * Resolves a call's declared (lexically normalized) accesses to canonical paths, so the
 * scheduler (./scheduler.ts) sees that `/w/link` and `/w/target`, or `./a` and `a`, are one file,
 * and that different files are different. Called by the scheduler only once no earlier `all`
 * call waits or runs (see there why that closes the race with symlinks made by code).
 *
 * Runs as root in the agent, not in the tool user's worker: realpath(3) gives the same answer
 * for both wherever the tool user may search the directories on the way (same mount namespace,
 * same tree); where it may not, the call itself fails with a permission error in the worker, so
 * a canonical form the tool user could not have seen only affects whom that failing call waits
 * for. It saves a worker round trip per call. Which paths a call may touch is still decided by
 * file-ops' realpath check against the policy's roots, never by this.
 */
import { lstat, readlink, realpath } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Access } from './scheduler.js';

/** Symlinks followed by hand before giving up, as the kernel's own limit (ELOOP). */
const MAX_LINKS = 40;

/**
 * The canonical form of absolute `path`: its realpath when it exists; else the realpath of its
 * nearest existing parent plus the missing rest, following a dangling symlink to where its
 * target would be (a write through it creates that target). Rejects on errors other than a
 * missing component (EACCES, ENOTDIR, ELOOP, too many links).
 */
export async function canonicalPath(path: string, linksLeft = MAX_LINKS): Promise<string> {
  const normalized = posix.normalize(path);
  try {
    return await realpath(normalized);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const parent = posix.dirname(normalized);
  if (parent === normalized) return normalized;
  const canonicalParent = await canonicalPath(parent, linksLeft);
  const here = posix.join(canonicalParent, posix.basename(normalized));
  const stat = await lstat(here).catch(() => null);
  if (!stat?.isSymbolicLink()) return here;
  // A dangling link: the file it names would be made at its target.
  if (linksLeft <= 0) throw Object.assign(new Error(`too many symlinks resolving ${path}`), { code: 'ELOOP' });
  const target = await readlink(here);
  return canonicalPath(posix.resolve(canonicalParent, target), linksLeft - 1);
}

/**
 * Canonical accesses for declared ones: each path access resolved by canonicalPath; a path that
 * cannot be resolved makes the call touch `all` (it then runs alone, in order — safe, and the
 * call reports the real error itself). Never rejects.
 */
export async function resolveAccesses(declared: readonly Access[]): Promise<Access[]> {
  const resolved: Access[] = [];
  for (const access of declared) {
    if (access.kind === 'all') return [{ kind: 'all' }];
    const path = await canonicalPath(access.path).catch(() => null);
    if (path === null) return [{ kind: 'all' }];
    resolved.push({ ...access, path });
  }
  return resolved;
}
