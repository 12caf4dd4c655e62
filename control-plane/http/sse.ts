/**
 * Server-Sent Events of an ordered, gap-free event list (a call's events, an image build's): each
 * event goes out with `id:` = its `seq`; a client that reconnects with `Last-Event-ID` gets every
 * later event exactly once, in order. The stream reads the store, pushes what is new, and sleeps
 * until the store's notification (or a keep-alive period) — never polls on a timer alone. It ends
 * after a terminal event, or at once when a resumed stream is already past the last one.
 */
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { createSession } from 'better-sse';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Notifier } from '../redis/notifier.js';

/** SSE comment heartbeat interval, ms: keeps proxies from closing an idle stream. */
export const SSE_KEEPALIVE_MS = 15_000;

/** Where a stream's events come from. */
export interface SseSource<E extends { seq: number; type: string }> {
  /** The notifier channel the store publishes on when events are appended. */
  channel: string;
  /** Events with `seq` > `afterSeq`, in order. */
  read(afterSeq: number): Promise<E[]>;
  /** Whether `event` is the last one there will ever be. */
  isTerminal(event: E): boolean;
  /** Whether the stream's subject has ended (asked when a read found nothing new). */
  ended(): Promise<boolean>;
}

/**
 * Hijacks `reply` and opens an SSE session on it, for a stream that is not an `SseSource` (the
 * file watch, watch/routes.ts): `push(data, event, id?)`.
 */
export async function openSseSession(
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<{ push(data: unknown, event: string, id?: string): void }> {
  reply.hijack();
  return createSession(request.raw, reply.raw, { keepAlive: SSE_KEEPALIVE_MS, retry: 1000 });
}

/**
 * Resolves once `stream` drained, closed (a client gone without the request's signal knowing it
 * yet) or `signal` aborted, whichever is first, and takes its listeners off the others: a long
 * stream waits for a slow client many times on one request's signal, and a listener left behind
 * by each wait added up (Node's MaxListenersExceededWarning in CI). Rejects with the stream's
 * error when it emits `error` first.
 */
export async function drainedOrAborted(stream: Writable, signal: AbortSignal): Promise<void> {
  if (signal.aborted || stream.closed || stream.destroyed) return;
  const settled = new AbortController();
  const options = { signal: settled.signal };
  try {
    // Promise.race handles the losers' rejections (an AbortError each once `settled` aborts).
    await Promise.race([once(stream, 'drain', options), once(stream, 'close', options), once(signal, 'abort', options)]);
  } finally {
    settled.abort();
  }
}

/** Hijacks `reply` and streams `source`'s events after `afterSeq` until a terminal event or the client leaves. */
export async function streamSse<E extends { seq: number; type: string }>(
  request: FastifyRequest,
  reply: FastifyReply,
  notifier: Pick<Notifier, 'next'>,
  source: SseSource<E>,
  afterSeq: number,
): Promise<void> {
  reply.hijack();
  const session = await createSession(request.raw, reply.raw, { keepAlive: SSE_KEEPALIVE_MS, retry: 1000 });
  const closed = new AbortController();
  request.raw.on('close', () => closed.abort());
  let seq = afterSeq;
  try {
    while (!closed.signal.aborted) {
      const wake = notifier.next(source.channel, SSE_KEEPALIVE_MS, closed.signal);
      const events = await source.read(seq);
      for (const event of events) {
        session.push(event, event.type, String(event.seq));
        seq = event.seq;
      }
      const last = events.at(-1);
      if (last && source.isTerminal(last)) break;
      // Resumed after the last event of a finished subject: nothing more will come.
      if (events.length === 0 && (await source.ended())) break;
      await wake;
    }
  } catch (err) {
    request.log.warn({ err }, 'event stream ended with an error');
  } finally {
    reply.raw.end();
  }
}
