/**
 * File watch on the wire (issue 13 part 7): the lease's file change log, which the agent keeps
 * for every file root of the lease from its start (`LeaseKeys.changes`, a Redis stream), and the
 * views the control plane serves of it (`GET /v1/sandboxes/:id/files/watch` as SSE,
 * `GET /v1/sandboxes/:id/files/changes?since=`).
 *
 * `seq` numbers the log from 1 without gaps: a watch of a whole root sees every number; a watch
 * of a narrower path sees the subsequence under its path. A cursor is a `seq` (the last one a
 * client has); `0` is "from the start of the log".
 */
import { z } from 'zod';

/** What a change is about, by lstat when it was seen; null: gone already (or unknown). */
export const ChangeKind = z.enum(['file', 'directory', 'symlink', 'other']);
export type ChangeKind = z.infer<typeof ChangeKind>;

/** One change of the tree. `renamed` carries both paths (`oldPath` → `path`), paired by inotify cookie. */
export const FileChange = z.object({
  seq: z.number().int().positive(),
  type: z.enum(['created', 'modified', 'deleted', 'renamed']),
  /** Canonical path inside the sandbox (the new one of a rename). */
  path: z.string(),
  /** The old path of a `renamed`. */
  oldPath: z.string().optional(),
  kind: ChangeKind.nullable(),
  /** Size by lstat when seen, bytes; null for deletions and what was gone already. */
  sizeBytes: z.number().int().nonnegative().nullable(),
  /** When the agent saw it (ISO 8601). */
  at: z.string(),
});
export type FileChange = z.infer<typeof FileChange>;

/**
 * Changes were lost: the reader must list the tree again (resync). `reason`: `kernel_queue` (the
 * kernel's inotify queue overflowed, IN_Q_OVERFLOW), `agent_buffer` (more changes buffered in the
 * agent than it keeps, `dropped` counted), `watch_limit` (a directory could not be watched: the
 * kernel's max_user_watches; `path`), `watcher_restarted` (the inotify helper ended and was
 * started again), `agent_restarted` (the agent started again; nothing was seen meanwhile),
 * `client_behind` (this reader fell behind what the log keeps; only on the SSE stream, not in the
 * log, with `seq` the last one it missed).
 */
export const WatchOverflow = z.object({
  seq: z.number().int().nonnegative(),
  type: z.literal('watch.overflow'),
  reason: z.enum(['kernel_queue', 'agent_buffer', 'watch_limit', 'watcher_restarted', 'agent_restarted', 'client_behind']),
  dropped: z.number().int().nonnegative().optional(),
  path: z.string().optional(),
  at: z.string(),
});
export type WatchOverflow = z.infer<typeof WatchOverflow>;

/** The agent's watch is in place over `roots` (first entry of a log; again after a restart of its helper). */
export const WatchStarted = z.object({
  seq: z.number().int().positive(),
  type: z.literal('watch.started'),
  roots: z.array(z.string()),
  at: z.string(),
});
export type WatchStarted = z.infer<typeof WatchStarted>;

/** One entry of the change log (the JSON in field `e` of a stream entry). */
export const ChangeEntry = z.union([FileChange, WatchOverflow, WatchStarted]);
export type ChangeEntry = z.infer<typeof ChangeEntry>;

/** Field of a change-log stream entry that holds its JSON. */
export const CHANGE_FIELD = 'e';

/** Entries the agent keeps in a lease's change log (XADD MAXLEN ~): older cursors get `resync_required`. */
export const CHANGE_LOG_MAX_ENTRIES = 10_000;
