/**
 * File watch in the SDK (issue 13 part 7): `sandbox.files.watch(path, {recursive, onEvent})`
 * holds the SSE stream of `GET /v1/sandboxes/:id/files/watch` (reopened with `Last-Event-ID`
 * when it drops, so each change arrives once, in order); `sandbox.files.changes(since)` polls
 * `GET /v1/sandboxes/:id/files/changes`.
 */
import { EventSourceParserStream } from 'eventsource-parser/stream';
import { z } from 'zod';
import { ChangeEntry } from '../contract/watch.js';
import { SbxError, errorOfResponse } from './errors.js';

/** An authenticated request to the API (`path` from `/v1`), network failures as `api.unreachable`. */
export type Send = (path: string, init: { headers?: Record<string, string>; signal?: AbortSignal }) => Promise<Response>;

/** What a watch delivers: changes and overflows (with `seq`), and its `watch.ready` / `watch.ended`. */
export type WatchEvent =
  | ChangeEntry
  | { type: 'watch.ready'; cursor: number; path: string; recursive: boolean }
  | { type: 'watch.ended'; reason: string; cursor: number };

export interface WatchOptions {
  /** Everything under `path` (default true); false: `path` and its direct children. */
  recursive?: boolean;
  /** Start after this cursor (a `seq` or the `cursor` of `changes()`); default: from now. */
  since?: number;
  /** Called for every event, in order. */
  onEvent?: (event: WatchEvent) => void;
  /**
   * Called once the watch is in place, before any event: the path it watches (resolved) and the
   * cursor it starts after (`since` when given, else the cursor of now).
   */
  onReady?: (ready: { cursor: number; path: string }) => void;
  /** Aborting closes the watch. */
  signal?: AbortSignal;
}

/** An open watch: `cursor` is the last `seq` delivered; `done` settles when it ends. */
export interface FileWatch {
  readonly path: string;
  readonly cursor: number;
  /** Resolves when the watch ends (closed, or the sandbox ended); rejects with SbxError when it failed. */
  readonly done: Promise<void>;
  close(): void;
}

export const ChangesPage = z.object({ changes: z.array(ChangeEntry), cursor: z.number().int(), more: z.boolean() });
export type ChangesPage = z.infer<typeof ChangesPage>;

const MAX_RECONNECTS = 20;
const RECONNECT_DELAY_MS = 200;

/**
 * Opens a watch of `path` and resolves once it is in place (`watch.ready`): every change after
 * that is delivered. Throws SbxError `input.path_outside_workspace`, `watch.limit_exceeded`,
 * `watch.resync_required` (a `since` older than the log keeps), `lease.*`.
 */
export async function openWatch(send: Send, leaseId: string, path: string, options: WatchOptions = {}): Promise<FileWatch> {
  const abort = new AbortController();
  options.signal?.addEventListener('abort', () => abort.abort(), { once: true });
  const query = new URLSearchParams({ path, recursive: String(options.recursive ?? true) });
  if (options.since !== undefined) query.set('since', String(options.since));
  let cursor = options.since ?? -1;
  let resolvedPath = path;
  const open = async (): Promise<ReadableStream<{ event?: string; data: string }>> => {
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (cursor >= 0) headers['last-event-id'] = String(cursor);
    const response = await send(`/v1/sandboxes/${leaseId}/files/watch?${query.toString()}`, { headers, signal: abort.signal });
    if (!response.ok || !response.body) throw await errorOfResponse(response);
    return response.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
  };
  let first = await open();
  let ready!: () => void;
  const readyOnce = new Promise<void>((r) => (ready = r));
  const run = async (): Promise<void> => {
    for (let attempt = 0; attempt <= MAX_RECONNECTS; attempt += 1) {
      let stream = first;
      if (attempt > 0) {
        await new Promise((r) => setTimeout(r, RECONNECT_DELAY_MS));
        if (abort.signal.aborted) return;
        try {
          stream = await open();
        } catch (err) {
          if (abort.signal.aborted) return;
          if (err instanceof SbxError && err.code === 'api.unreachable') continue;
          throw err;
        }
      }
      try {
        for await (const message of stream) {
          const data = JSON.parse(message.data) as WatchEvent & { seq?: number };
          if (message.event === 'watch.ready') {
            const r = data as { cursor: number; path: string };
            if (cursor < 0) cursor = r.cursor;
            resolvedPath = r.path;
            options.onReady?.({ cursor, path: r.path });
            ready();
            continue;
          }
          if (typeof data.seq === 'number') {
            if (data.seq <= cursor) continue;
            cursor = data.seq;
          }
          options.onEvent?.(data);
          if (data.type === 'watch.ended') return;
        }
      } catch (err) {
        if (abort.signal.aborted) return;
        if (err instanceof SyntaxError) throw err;
      }
      if (abort.signal.aborted) return;
    }
    throw new SbxError({
      code: 'api.unreachable',
      domain: 'api',
      retryability: 'reconcile_first',
      message: `the file watch of ${path} kept dropping`,
      details: { leaseId, path, cursor },
    });
  };
  const done = run();
  // A stream that ends before `watch.ready` still settles the open.
  await Promise.race([readyOnce, done]);
  return {
    get path() {
      return resolvedPath;
    },
    get cursor() {
      return cursor;
    },
    done,
    close: () => abort.abort(),
  };
}

/**
 * Changes after `since` (omit it for the cursor of now), at most `limit` log entries looked at.
 * Throws SbxError `watch.resync_required` (details.cursor: where to continue after relisting).
 */
export async function fetchChanges(
  send: Send,
  leaseId: string,
  options: { since?: number; path?: string; recursive?: boolean; limit?: number } = {},
): Promise<ChangesPage> {
  const query = new URLSearchParams();
  if (options.since !== undefined) query.set('since', String(options.since));
  if (options.path !== undefined) query.set('path', options.path);
  if (options.recursive !== undefined) query.set('recursive', String(options.recursive));
  if (options.limit !== undefined) query.set('limit', String(options.limit));
  const response = await send(`/v1/sandboxes/${leaseId}/files/changes?${query.toString()}`, {});
  if (!response.ok) throw await errorOfResponse(response);
  return ChangesPage.parse(await response.json());
}
