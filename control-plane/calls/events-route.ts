/**
 * A call's events as Server-Sent Events, for every route that streams one (a call's own, a
 * terminal's): `id:` is the gap-free `seq`, `Last-Event-ID` resumes after it, the stream ends
 * after `call.finished`.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { streamSse } from '../http/sse.js';
import type { Notifier } from '../redis/notifier.js';
import type { CallStore } from './store.js';

/** What streaming a call's events reads. */
export interface CallEventsDeps {
  store: Pick<CallStore, 'notifyChannel' | 'readEvents' | 'getCall'>;
  notifier: Pick<Notifier, 'next'>;
}

/** Streams the events of call `callId` of lease `leaseId` after the request's `Last-Event-ID` (0: all). The caller checked the call exists. */
export async function streamCallEvents(
  request: FastifyRequest,
  reply: FastifyReply,
  { store, notifier }: CallEventsDeps,
  leaseId: string,
  callId: string,
): Promise<void> {
  await streamSse(
    request,
    reply,
    notifier,
    {
      channel: store.notifyChannel(leaseId, callId),
      read: (seq) => store.readEvents(leaseId, callId, seq),
      isTerminal: (event) => event.type === 'call.finished',
      ended: async () => (await store.getCall(leaseId, callId))?.status === 'finished',
    },
    Number(request.headers['last-event-id'] ?? 0),
  );
}
