/**
 * `GET /v1/sandboxes/:id/files/watch` (SSE) and `GET /v1/sandboxes/:id/files/changes` (polling)
 * over the lease's file change log (watch/service.ts). A watch holds one slot of the lease's
 * `watch.maxConcurrent` while its client is connected; it ends when the client disconnects
 * (slot and blocking Redis connection given back) or the lease ends (`watch.ended`).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { AppError } from '../../contract/errors.js';
import type { Principal } from '../http/auth.js';
import { drainedOrAborted, openSseSession } from '../http/sse.js';
import { LeaseParams } from '../leases/schema.js';
import type { LeaseRecord } from '../leases/store.js';
import { ChangesQuery, WatchHeaders, WatchQuery } from './schema.js';
import { checkCursor, inScope, type WatchScope, type WatchService } from './service.js';
import type { RedisChangeLog } from './store.js';

export interface WatchRoutesOptions {
  watch: WatchService;
  log: RedisChangeLog;
  /** Throws when the lease may not be used any more (LeaseService.active). */
  active(id: string, by: Principal): Promise<LeaseRecord>;
  /** Longest wait on the log before the lease is looked at again, ms (default 5000). */
  blockMs?: number;
}

/** Entries read from the log at once for a stream. */
const STREAM_BATCH = 500;
/** Lease errors that end a watch (anything else, e.g. a pause, lets it wait). */
const ENDED = new Set(['lease.expired', 'lease.released', 'lease.not_found']);

const roots = (lease: LeaseRecord): string[] => lease.policySnapshot.filesystem.writableRoots.map((r) => r.path);

export const watchRoutes: FastifyPluginAsync<WatchRoutesOptions> = async (plugin, opts) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['files'];
  const blockMs = opts.blockMs ?? 5000;

  const watchSchema = {
    tags,
    summary: 'Watch file changes as Server-Sent Events',
    description:
      "Streams changes under `path` (created, modified, deleted, renamed with `oldPath`; `kind`, `sizeBytes`) from the sandbox's change log. First event `watch.ready` (`cursor`, the canonical `path`). Every change has `id:` = its `seq` (gap-free over the log; a narrower path sees the subsequence under it); reconnect with `Last-Event-ID` (or `since=`) to get every later change exactly once. Lost changes are a `watch.overflow` event (`reason`), never silence. A cursor older than the log keeps is `410 watch.resync_required`; a path outside the file roots (symlinks resolved) `400 input.path_outside_workspace`; more than the policy's `watch.maxConcurrent` open watches `429 watch.limit_exceeded`; the path resolved by the sandbox's agent (as its tool user), whose broken or late answer (10 s in all) is `502 files.transfer_broken`. Ends when the client disconnects, or with `watch.ended` when the sandbox ends.",
    params: LeaseParams,
    querystring: WatchQuery,
    headers: WatchHeaders,
  };
  app.get('/v1/sandboxes/:id/files/watch', { schema: watchSchema, config: { lease: 'active' } }, async (request, reply) => {
    const { id } = request.params;
    const lease = request.lease;
    const scope = await opts.watch.scope(id, request.query.path, request.query.recursive ?? true, roots(lease));
    const header = request.headers['last-event-id'];
    const resume = header !== undefined ? Number(header) : request.query.since;
    const first = await opts.log.read(id, resume ?? 0, 1);
    if (resume !== undefined) checkCursor(resume, first);
    const max = lease.policySnapshot.watch?.maxConcurrent ?? 8;
    const watchId = randomUUID();
    const slotUntil = (): number => Date.now() + 3 * blockMs + 10_000;
    if (!(await opts.log.takeSlot(id, watchId, max, Date.now(), slotUntil()))) {
      throw new AppError('watch.limit_exceeded', `sandbox ${id} already has ${max} open file watches (policy watch.maxConcurrent)`, {
        details: { limit: max },
      });
    }
    const connection = opts.log.blockingConnection();
    const closed = new AbortController();
    request.raw.on('close', () => {
      closed.abort();
      connection.disconnect();
    });
    try {
      const session = await openSseSession(request, reply);
      const cursor = resume ?? first.lastSeq;
      // `id:` the cursor (better-sse would make one up): an EventSource resumes from it.
      session.push({ type: 'watch.ready', cursor, path: scope.path, recursive: scope.recursive }, 'watch.ready', String(cursor));
      await pump(id, scope, cursor, connection, closed.signal, (data, type, seq) => session.push(data, type, seq), request.principal);
    } catch (err) {
      if (!closed.signal.aborted) request.log.warn({ err }, 'file watch ended with an error');
    } finally {
      connection.disconnect();
      await opts.log.releaseSlot(id, watchId).catch((err: unknown) => request.log.warn({ err }, 'file watch slot not given back'));
      reply.raw.end();
    }

    /** Pushes the log's entries in scope after `from` until the client leaves or the lease ends. */
    async function pump(
      leaseId: string,
      where: WatchScope,
      from: number,
      conn: ReturnType<RedisChangeLog['blockingConnection']>,
      signal: AbortSignal,
      push: (data: unknown, type: string, seq?: string) => void,
      by: Principal,
    ): Promise<void> {
      let seq = from;
      while (!signal.aborted) {
        const read = await opts.log.read(leaseId, seq, STREAM_BATCH);
        if (read.oldestSeq !== null && seq < read.oldestSeq - 1) {
          // This reader fell behind what the log keeps: say so, then go on from the oldest kept.
          push(
            { seq: read.oldestSeq - 1, type: 'watch.overflow', reason: 'client_behind', at: new Date().toISOString() },
            'watch.overflow',
            String(read.oldestSeq - 1),
          );
          seq = read.oldestSeq - 1;
          continue;
        }
        for (const entry of read.entries) {
          seq = entry.seq;
          if (inScope(entry, where)) push(entry, entry.type, String(entry.seq));
        }
        // Bounded: a client that does not read holds the stream here, not in this process's memory.
        if (reply.raw.writableNeedDrain) await drainedOrAborted(reply.raw, signal);
        if (read.entries.length === STREAM_BATCH) continue;
        try {
          await opts.active(leaseId, by);
        } catch (err) {
          if (err instanceof AppError && ENDED.has(err.code)) {
            push({ type: 'watch.ended', reason: err.code, cursor: seq }, 'watch.ended', String(seq));
            return;
          }
        }
        await opts.log.takeSlot(leaseId, watchId, Number.MAX_SAFE_INTEGER, Date.now(), slotUntil());
        await opts.log.waitAfter(conn, leaseId, seq, blockMs);
      }
    }
  });

  const changesSchema = {
    tags,
    summary: 'File changes since a cursor (polling)',
    description:
      "What changed in the sandbox's file roots after `since` (a cursor from the previous answer), in order, at most `limit` entries of the change log looked at (`more`: ask again at once). Without `since`: no changes and the cursor of now. `410 watch.resync_required` when the cursor is older than the log keeps (list the tree again, continue from `details.cursor`). The agent keeps the log from the sandbox's start, whether or not anyone watches. Without `path` it answers also while the sandbox is paused (and after it ended, while its log is kept); a `path` is resolved in the running sandbox by its agent, so then a paused one is `409 lease.paused`, and an answer broken or later than 10 s `502 files.transfer_broken`.",
    params: LeaseParams,
    querystring: ChangesQuery,
  };
  // A read of the log (in Redis), so it answers while the sandbox is paused too; only a `path`
  // needs the running sandbox (its symlinks are resolved inside it): then the lease must be usable.
  app.get('/v1/sandboxes/:id/files/changes', { schema: changesSchema, config: { lease: 'visible' } }, async (request) => {
    const { id } = request.params;
    const { since, path, limit } = request.query;
    const recursive = request.query.recursive ?? true;
    const scope =
      path === undefined
        ? { path: '/', recursive: true }
        : await (async () => {
            const lease = await opts.active(id, request.principal);
            return opts.watch.scope(id, path, recursive, roots(lease));
          })();
    return opts.watch.changes(id, since, scope, limit ?? 1000);
  });
};
