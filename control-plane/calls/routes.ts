/**
 * Call routes: submit (with `?wait=` long-poll), read, cancel, the tool list, receipts, and the
 * per-call event stream as Server-Sent Events (`id:` = `seq`; `Last-Event-ID` resumes after it).
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { AppError } from '../../contract/errors.js';
import type { Notifier } from '../redis/notifier.js';
import { LeaseParams } from '../leases/schema.js';
import type { LeaseService } from '../leases/service.js';
import { CallEventsHeaders, CallParams, ListCallsQuery, ReceiptParams, SubmitCallBody, SubmitCallQuery } from './schema.js';
import type { CallService } from './service.js';
import type { SessionService } from '../sessions/service.js';
import { streamSse } from '../http/sse.js';
import type { ApprovalService } from './approval-service.js';
import type { CallStore } from './store.js';
import type { Tracing } from '../telemetry/tracing.js';
import { describeTools, TOOLS } from './tools.js';

export interface CallsRoutesOptions {
  /** Who may see a receipt's lease, and whether a lease may be used now (cancel). */
  leases: Pick<LeaseService, 'canSee' | 'usable'>;
  calls: CallService;
  approvals: Pick<ApprovalService, 'approve' | 'deny' | 'listPending'>;
  store: Pick<CallStore, 'getReceipt' | 'notifyChannel' | 'readEvents' | 'getCall' | 'listCalls'>;
  notifier: Pick<Notifier, 'next'>;
  /** A session command (`exec` with `session`) is refused unless its session runs (`session.not_found`, `session.ended`). */
  sessions: Pick<SessionService, 'assertRunning'>;
  /** Reads a submission's `traceparent`: the parent of the call's span. */
  tracing: Pick<Tracing, 'parentOf'>;
}

/** Largest call body, bytes. */
const CALL_BODY_LIMIT_BYTES = 48 * 1024 * 1024;

export const callsRoutes: FastifyPluginAsync<CallsRoutesOptions> = async (
  plugin,
  { leases, calls, approvals, store, notifier, sessions, tracing },
) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['calls'];

  app.get('/v1/tools', { schema: { tags, summary: 'The tools, with their input JSON Schemas' } }, async () => ({ tools: describeTools() }));

  // write_file carries up to 32 MiB of content (base64: 4/3 of that) in its JSON body.
  const submitSchema = {
    tags,
    summary: 'Submit a tool call',
    description:
      'The finished ToolResult (`200`) when the call ends within `wait` seconds, else `202 {callId, status}`. Resubmitting a callId with the same args returns the same call.',
    params: LeaseParams,
    querystring: SubmitCallQuery,
    body: SubmitCallBody,
  };
  app.post(
    '/v1/sandboxes/:id/calls',
    { bodyLimit: CALL_BODY_LIMIT_BYTES, schema: submitSchema, config: { lease: 'active' } },
    async (request, reply) => {
      const { id } = request.params;
      const { wait } = request.query;
      // An internal tool (a session's shell, a terminal) is started by its own route, which checks its limits first.
      const internal = TOOLS.get(request.body.tool)?.spec.internal;
      if (internal) {
        throw new AppError('input.invalid', `${request.body.tool} is started with ${internal.startedBy}`, {
          details: { issues: [{ path: 'tool', message: `use ${internal.startedBy}` }] },
        });
      }
      const session = request.body.tool === 'exec' ? request.body.args.session : undefined;
      if (typeof session === 'string' && /^ses_[0-9a-f]{32}$/.test(session)) await sessions.assertRunning(id, session);
      const parent = tracing.parentOf(request.headers) ?? undefined;
      const view = wait
        ? await calls.submitAndWait(request.lease, request.body, wait * 1000, parent)
        : (await calls.submit(request.lease, request.body, parent)).call;
      if (view.status === 'finished' && view.result) return reply.status(200).send(view.result);
      if (view.status === 'detached' && view.detached) return reply.status(200).send(view.detached);
      return reply.status(202).send({ callId: view.callId, status: view.status });
    },
  );

  app.get(
    '/v1/sandboxes/:id/calls',
    {
      schema: {
        tags,
        summary: 'List the newest calls of a sandbox',
        description:
          '`{calls: [{callId, tool, status, createdAt}]}`, newest first, at most `limit` (default 100, at most 1000); read each with `GET .../calls/:callId`.',
        params: LeaseParams,
        querystring: ListCallsQuery,
      },
      config: { lease: 'visible' },
    },
    async (request) => ({ calls: await store.listCalls(request.params.id, request.query.limit) }),
  );

  app.get(
    '/v1/sandboxes/:id/calls/:callId',
    { schema: { tags, summary: 'Read a call: intent, status, result with receipt', params: CallParams }, config: { lease: 'visible' } },
    async (request) => {
      const { id, callId } = request.params;
      return calls.get(id, callId);
    },
  );

  const cancelSchema = {
    tags,
    summary: 'Cancel a call',
    description: '`202` while it can still be cancelled; a finished call is `200`, unchanged.',
    params: CallParams,
  };
  app.post('/v1/sandboxes/:id/calls/:callId/cancel', { schema: cancelSchema, config: { lease: 'visible' } }, async (request, reply) => {
    // Finished is final, even after the sandbox went: nothing to cancel (200); else the lease must be usable.
    const { call, changed } = await calls.cancel(request.lease, request.params.callId, (lease) => leases.usable(lease));
    return reply.status(changed ? 202 : 200).send(call);
  });

  for (const verdict of ['approve', 'deny'] as const) {
    const schema = {
      tags,
      summary:
        verdict === 'approve'
          ? 'Approve a call waiting for approval: it runs (approver or admin key)'
          : 'Deny a call waiting for approval: it ends denied (approver or admin key)',
      description:
        "Idempotent. `403 auth.approver_required` for a user key; `409 approval.expired` past the deadline; `409 approval.not_pending` for a call that does not wait. The approval binds the call's fingerprint: another call (other args) needs its own.",
      params: CallParams,
    };
    app.post(`/v1/sandboxes/:id/calls/:callId/${verdict}`, { schema, config: { lease: 'active' } }, async (request) =>
      verdict === 'approve'
        ? approvals.approve(request.lease, request.params.callId, request.principal)
        : approvals.deny(request.lease, request.params.callId, request.principal),
    );
  }

  const listSchema = {
    tags,
    summary: 'The calls waiting for approval (approver or admin key), soonest deadline first',
    description:
      "`{approvals: [{sandboxId, callId, tool, args, truncatedArgs, fingerprint, rule, createdAt, expiresAt}]}`: the key's tenant's (an admin key's: every tenant's), at most 500. String arguments over 2048 characters are cut (named in `truncatedArgs`; the call has them whole). `403 auth.approver_required` for a user key.",
  };
  app.get('/v1/approvals', { schema: listSchema }, async (request) => ({
    approvals: await approvals.listPending(request.principal, (leaseId) => leases.canSee(leaseId, request.principal)),
  }));

  app.get('/v1/receipts/:receiptId', { schema: { tags, summary: 'Read a receipt', params: ReceiptParams } }, async (request) => {
    const { receiptId } = request.params;
    const receipt = await store.getReceipt(receiptId);
    // Another tenant's receipt is as absent as a missing one.
    if (!receipt || !(await leases.canSee(receipt.leaseId, request.principal)))
      throw new AppError('receipt.not_found', `no receipt ${receiptId}`, { details: { receiptId } });
    return receipt;
  });

  const eventsSchema = {
    tags,
    summary: "The call's events as Server-Sent Events",
    description:
      '`id:` is the gap-free `seq`; reconnect with `Last-Event-ID` to receive every later event exactly once. Ends after `call.finished`.',
    params: CallParams,
    headers: CallEventsHeaders,
  };
  app.get('/v1/sandboxes/:id/calls/:callId/events', { schema: eventsSchema, config: { lease: 'visible' } }, async (request, reply) => {
    const { id, callId } = request.params;
    await calls.get(id, callId);
    await streamCallEvents(request, reply, { store, notifier }, id, callId);
  });
};

/** What streaming a call's events reads. */
export interface CallEventsDeps {
  store: Pick<CallStore, 'notifyChannel' | 'readEvents' | 'getCall'>;
  notifier: Pick<Notifier, 'next'>;
}

/**
 * Streams the events of call `callId` of lease `leaseId` after the request's `Last-Event-ID` (0: all) as Server-Sent
 * Events (`id:` = `seq`; ends after `call.finished`): a call's own route and a terminal's. The caller
 * checked the call exists.
 */
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
