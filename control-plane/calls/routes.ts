/**
 * Call routes: submit (with `?wait=` long-poll), read, cancel, the tool list, receipts, and the
 * per-call event stream as Server-Sent Events (`id:` = `seq`; `Last-Event-ID` resumes after it).
 */
import { createSession } from 'better-sse';
import type { FastifyPluginAsync } from 'fastify';
import { AppError } from '../../contract/errors.js';
import { parseInput } from '../http/errors.js';
import type { Ledger } from '../ledger/ledger.js';
import type { CallNotifier } from '../ledger/notifier.js';
import { LeaseParams } from '../leases/schema.js';
import type { LeaseService } from '../leases/service.js';
import { CallParams, SubmitCallBody, SubmitCallQuery } from './schema.js';
import type { CallService } from './service.js';
import { describeTools } from './tools.js';

export interface CallsRoutesOptions {
  leases: LeaseService;
  calls: CallService;
  ledger: Ledger;
  notifier: CallNotifier;
}

/** Largest call body, bytes. */
const CALL_BODY_LIMIT_BYTES = 48 * 1024 * 1024;

/** SSE comment heartbeat interval, ms: keeps proxies from closing an idle stream. */
const SSE_KEEPALIVE_MS = 15_000;

export const callsRoutes: FastifyPluginAsync<CallsRoutesOptions> = async (app, { leases, calls, ledger, notifier }) => {
  app.get('/v1/tools', async () => ({ tools: describeTools() }));

  // write_file carries up to 32 MiB of content (base64: 4/3 of that) in its JSON body.
  app.post('/v1/sandboxes/:id/calls', { bodyLimit: CALL_BODY_LIMIT_BYTES }, async (request, reply) => {
    const { id } = parseInput(LeaseParams, request.params, 'params');
    const { wait } = parseInput(SubmitCallQuery, request.query, 'query');
    const body = parseInput(SubmitCallBody, request.body, 'body');
    const lease = await leases.active(id, request.principal);
    const { call } = await calls.submit(lease, body);
    const view = wait ? await calls.waitFinished(id, call.callId, wait * 1000) : call;
    if (view.status === 'finished' && view.result) return reply.status(200).send(view.result);
    if (view.status === 'detached' && view.detached) return reply.status(200).send(view.detached);
    return reply.status(202).send({ callId: view.callId, status: view.status });
  });

  app.get('/v1/sandboxes/:id/calls/:callId', async (request) => {
    const { id, callId } = parseInput(CallParams, request.params, 'params');
    await leases.get(id, request.principal);
    return calls.get(id, callId);
  });

  app.post('/v1/sandboxes/:id/calls/:callId/cancel', async (request, reply) => {
    const { id, callId } = parseInput(CallParams, request.params, 'params');
    await leases.get(id, request.principal);
    const before = await calls.get(id, callId);
    // Finished is final, even after the sandbox went: nothing to cancel.
    if (before.status === 'finished') return reply.status(200).send(before);
    const lease = await leases.active(id, request.principal);
    return reply.status(202).send(await calls.cancel(lease, callId));
  });

  app.get('/v1/receipts/:receiptId', async (request) => {
    const { receiptId } = request.params as { receiptId: string };
    const receipt = await ledger.getReceipt(receiptId);
    // Another tenant's receipt is as absent as a missing one.
    if (!receipt || !(await leases.canSee(receipt.leaseId, request.principal))) throw new AppError('receipt.not_found', `no receipt ${receiptId}`, { details: { receiptId } });
    return receipt;
  });

  app.get('/v1/sandboxes/:id/calls/:callId/events', async (request, reply) => {
    const { id, callId } = parseInput(CallParams, request.params, 'params');
    await leases.get(id, request.principal);
    await calls.get(id, callId);
    const lastEventId = request.headers['last-event-id'];
    const after = lastEventId === undefined ? 0 : /^\d{1,15}$/.test(String(lastEventId)) ? Number(lastEventId) : Number.NaN;
    if (!Number.isSafeInteger(after)) {
      throw new AppError('input.invalid', 'Last-Event-ID must be a non-negative integer seq', { details: { issues: [{ path: 'headers.last-event-id', message: 'not a seq' }] } });
    }
    reply.hijack();
    const session = await createSession(request.raw, reply.raw, { keepAlive: SSE_KEEPALIVE_MS, retry: 1000 });
    const closed = new AbortController();
    request.raw.on('close', () => closed.abort());
    const channel = ledger.notifyChannel(id, callId);
    let seq = after;
    try {
      while (!closed.signal.aborted) {
        const wake = notifier.next(channel, SSE_KEEPALIVE_MS, closed.signal);
        const events = await ledger.readEvents(id, callId, seq);
        for (const event of events) {
          session.push(event, event.type, String(event.seq));
          seq = event.seq;
        }
        if (events.at(-1)?.type === 'call.finished') break;
        // Resumed after the last event of a finished call: nothing more will come.
        if (events.length === 0 && (await ledger.getCall(id, callId))?.status === 'finished') break;
        await wake;
      }
    } catch (err) {
      request.log.warn({ err, callId }, 'event stream ended with an error');
    } finally {
      reply.raw.end();
    }
  });
};
