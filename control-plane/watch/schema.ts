/**
 * File watch requests and answers (issue 13 part 7); the change entries themselves are
 * contract/watch.ts.
 */
import { z } from 'zod';
import { SandboxPath } from '../../contract/tools.js';
import { ChangeEntry } from '../../contract/watch.js';
import { MAX_CHANGES_PAGE } from './service.js';

/** A cursor: the `seq` of the last change a client has (0: from the log's start). */
const Cursor = z.coerce.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
/** `true`/`false` (also `1`/`0`) in a query string. */
const QueryBoolean = z
  .enum(['true', 'false', '1', '0'])
  .transform((v) => v === 'true' || v === '1')
  .optional();

export const WatchQuery = z
  .object({
    /** What to watch: a path inside the file roots (symlinks resolved inside the sandbox). */
    path: SandboxPath,
    /** Everything under `path` (default true); false: `path` and its direct children. */
    recursive: QueryBoolean,
    /** Resume after this cursor (as `Last-Event-ID`); default: from now. */
    since: Cursor.optional(),
  })
  .strict();

export const WatchHeaders = z
  .object({
    'last-event-id': z
      .string()
      .regex(/^\d{1,15}$/, 'Last-Event-ID must be a non-negative integer seq')
      .optional(),
  })
  .passthrough();

export const ChangesQuery = z
  .object({
    /** The cursor of the last answer; absent: no changes, the cursor of now. */
    since: Cursor.optional(),
    /** Only changes at or under this path (default: every root). */
    path: SandboxPath.optional(),
    /** As for the watch (default true). */
    recursive: QueryBoolean,
    /** Entries of the log looked at, at most (default 1000). */
    limit: z.coerce.number().int().min(1).max(MAX_CHANGES_PAGE).optional(),
  })
  .strict();

/** The answer of `changes` (documentation; the route's answer is WatchService.changes). */
export const ChangesResponse = z.object({
  changes: z.array(ChangeEntry),
  /** Ask with `since=` this next. */
  cursor: z.number().int().nonnegative(),
  /** More entries follow `cursor` already. */
  more: z.boolean(),
});
