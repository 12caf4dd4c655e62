/**
 * File watch (issue 13 part 7): which part of a lease's change log a reader asked for, and the
 * answers of `changes?since=`. The log itself is kept by the agent for every file root from the
 * lease's start (sandbox-agent/host/file-watch.ts); a watch is a filtered read of it, so opening
 * or closing one starts or stops nothing in the sandbox.
 */
import { posix } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { ChangeEntry } from '../../contract/watch.js';
import type { LogRead } from './store.js';

/** What the service needs of the log (watch/store.ts). */
export interface ChangeLogReader {
  read(leaseId: string, afterSeq: number, count: number): Promise<LogRead>;
}

/** What the service needs of the sandbox: canonical paths as its tool user sees them (the agent's `realpath`, files/transfers.ts). */
export interface PathResolver {
  realpath(leaseId: string, path: string): Promise<string>;
}

/** What a reader watches: `path` (canonical) and, with `recursive`, everything under it; else its direct children. */
export interface WatchScope {
  path: string;
  recursive: boolean;
}

/** The answer of `changes?since=`. */
export interface ChangesPage {
  /** Changes after `since` inside the scope, in order. */
  changes: ChangeEntry[];
  /** The cursor to ask with next: the last `seq` looked at (also when filtered out). */
  cursor: number;
  /** Whether more entries follow `cursor` already (ask again at once). */
  more: boolean;
}

/** Largest page of `changes`. */
export const MAX_CHANGES_PAGE = 10_000;

/**
 * Whether `entry` belongs to `scope`. Overflow and start entries concern every reader. A rename
 * is in scope when either of its paths is.
 */
export function inScope(entry: ChangeEntry, scope: WatchScope): boolean {
  if (entry.type === 'watch.overflow' || entry.type === 'watch.started') return true;
  const within = (p: string): boolean =>
    p === scope.path || (scope.recursive ? p.startsWith(scope.path === '/' ? '/' : `${scope.path}/`) : posix.dirname(p) === scope.path);
  return within(entry.path) || (entry.oldPath !== undefined && within(entry.oldPath));
}

/** The roots `path` must lie in: the lease's file roots (its writable roots). */
function insideRoots(path: string, roots: readonly string[]): boolean {
  return roots.some((r) => path === r || path.startsWith(`${r}/`));
}

export class WatchService {
  constructor(private readonly deps: { log: ChangeLogReader; paths: PathResolver }) {}

  /**
   * The canonical scope of a watch of `path`: normalized lexically and checked against `roots`,
   * then resolved inside the sandbox (symlinks followed, as the file tools do) and checked
   * again. Throws `input.path_outside_workspace` (details: path, resolved, roots).
   */
  async scope(leaseId: string, path: string, recursive: boolean, roots: readonly string[]): Promise<WatchScope> {
    const normalized = posix.normalize(path).replace(/(.)\/+$/, '$1');
    const outside = (resolved: string): AppError =>
      new AppError('input.path_outside_workspace', `${path} is outside the sandbox's file roots (${roots.join(', ')})`, {
        details: { field: 'path', path, resolved, roots: [...roots] },
      });
    if (!normalized.startsWith('/') || !insideRoots(normalized, roots)) throw outside(normalized);
    const resolved = posix.normalize(await this.deps.paths.realpath(leaseId, normalized)).replace(/(.)\/+$/, '$1');
    if (!insideRoots(resolved, roots)) throw outside(resolved);
    return { path: resolved, recursive };
  }

  /**
   * Changes after `since` within `scope`, at most `limit` entries of the log looked at. Without
   * `since`: no changes and the cursor of now. Throws `watch.resync_required` when entries after
   * `since` are no longer kept, or `since` is past the log's end (not one of its cursors).
   */
  async changes(leaseId: string, since: number | undefined, scope: WatchScope, limit: number): Promise<ChangesPage> {
    const read = await this.deps.log.read(leaseId, since ?? Number.MAX_SAFE_INTEGER - 1, since === undefined ? 1 : limit);
    if (since === undefined) return { changes: [], cursor: read.lastSeq, more: false };
    checkCursor(since, read);
    const last = read.entries.at(-1);
    const cursor = last ? last.seq : since;
    return { changes: read.entries.filter((e) => inScope(e, scope)), cursor, more: cursor < read.lastSeq };
  }
}

/** Throws `watch.resync_required` when `since` cannot be continued from in `read`'s log. */
export function checkCursor(since: number, read: Pick<LogRead, 'oldestSeq' | 'lastSeq'>): void {
  const lost = read.oldestSeq !== null && since < read.oldestSeq - 1;
  if (lost || since > read.lastSeq) {
    throw new AppError(
      'watch.resync_required',
      `cursor ${since} is ${lost ? 'older than the oldest change kept' : 'past the end of the change log'}; list the tree again, then continue from ${read.lastSeq}`,
      { details: { since, oldestSeq: read.oldestSeq, cursor: read.lastSeq } },
    );
  }
}
