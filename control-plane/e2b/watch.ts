/**
 * envd's `Filesystem/WatchDir` over sbx's file watch (watch/, issue 13 part 7): the sandbox's
 * change log from now on, in the watch's scope (canonical, inside the file roots), as E2B
 * filesystem events — `start` first, then `{name, type}` per change with `name` relative to the
 * watched directory; a rename is a RENAME of the old name and a CREATE of the new, as inotify-based
 * watchers report it. Changes the log lost (an overflow) end the stream with `data_loss`-like
 * `unavailable`, never silently. A watch takes one of the policy's `watch.maxConcurrent` places.
 */
import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import type { ServerResponse } from 'node:http';
import type { LeaseRecord } from '../leases/store.js';
import type { WatchService } from '../watch/service.js';
import type { RedisChangeLog } from '../watch/store.js';
import { ConnectError, endStream, envelope, toConnectError } from './connect.js';

/** Longest wait on the log before a keepalive and a renewal of the watch's place, ms. */
const BLOCK_MS = 15_000;
/** Entries of the log looked at per read. */
const PAGE = 500;

/** E2B's event type of an sbx change. */
const EVENT_TYPES = {
  created: 'EVENT_TYPE_CREATE',
  modified: 'EVENT_TYPE_WRITE',
  deleted: 'EVENT_TYPE_REMOVE',
  renamed: 'EVENT_TYPE_RENAME',
} as const;

export interface E2bWatchDeps {
  watch: Pick<WatchService, 'scope' | 'changes'>;
  log: Pick<RedisChangeLog, 'blockingConnection' | 'waitAfter' | 'takeSlot' | 'releaseSlot'>;
}

export class E2bWatch {
  constructor(private readonly deps: E2bWatchDeps) {}

  /**
   * Streams the changes under `path` into `res` (headers written) until `closed` aborts or the
   * log loses changes. Throws (before `start`) `input.path_outside_workspace`, `watch.limit_exceeded`.
   */
  async watchDir(lease: LeaseRecord, path: string, recursive: boolean, res: ServerResponse, closed: AbortSignal): Promise<void> {
    const roots = lease.policySnapshot.filesystem.writableRoots.map((r) => r.path);
    const scope = await this.deps.watch.scope(lease.id, path, recursive, roots);
    let cursor = (await this.deps.watch.changes(lease.id, undefined, scope, 1)).cursor;
    const max = lease.policySnapshot.watch?.maxConcurrent ?? 8;
    const watchId = randomUUID();
    const until = (): number => Date.now() + 3 * BLOCK_MS;
    if (!(await this.deps.log.takeSlot(lease.id, watchId, max, Date.now(), until())))
      throw new ConnectError(
        'resource_exhausted',
        `watch.limit_exceeded: sandbox ${lease.id} has ${max} open file watches (policy watch.maxConcurrent)`,
      );
    const connection = this.deps.log.blockingConnection();
    const stop = (): void => connection.disconnect();
    closed.addEventListener('abort', stop);
    let failure: ConnectError | undefined;
    try {
      res.write(envelope({ start: {} }));
      const name = (p: string): string => posix.relative(scope.path, p) || posix.basename(p);
      while (!closed.aborted) {
        const page = await this.deps.watch.changes(lease.id, cursor, scope, PAGE);
        for (const change of page.changes) {
          if (change.type === 'watch.started') continue;
          if (change.type === 'watch.overflow') {
            failure = new ConnectError(
              'unavailable',
              `watch.overflow: changes were lost (${change.reason}); list the directory again and watch anew`,
            );
            return;
          }
          if (change.type === 'renamed' && change.oldPath !== undefined) {
            res.write(envelope({ filesystem: { name: name(change.oldPath), type: EVENT_TYPES.renamed } }));
            res.write(envelope({ filesystem: { name: name(change.path), type: EVENT_TYPES.created } }));
          } else res.write(envelope({ filesystem: { name: name(change.path), type: EVENT_TYPES[change.type] } }));
        }
        cursor = page.cursor;
        if (page.more) continue;
        res.write(envelope({ keepalive: {} }));
        await this.deps.log.takeSlot(lease.id, watchId, Number.MAX_SAFE_INTEGER, Date.now(), until());
        await this.deps.log.waitAfter(connection, lease.id, cursor, BLOCK_MS);
      }
    } catch (err) {
      if (!closed.aborted) failure = toConnectError(err);
    } finally {
      closed.removeEventListener('abort', stop);
      connection.disconnect();
      await this.deps.log.releaseSlot(lease.id, watchId).catch(() => undefined);
      if (!closed.aborted) res.end(endStream(failure));
    }
  }
}
