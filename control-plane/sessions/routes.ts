/**
 * Shell session routes: create, list, read, delete, and run a command (`exec` with `session`,
 * answered like a call submit: the result within `?wait=`, else `202 {callId, status}`).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { SubmitCallQuery } from '../calls/schema.js';
import type { CallService } from '../calls/service.js';
import { LeaseParams } from '../leases/schema.js';
import type { LeaseService } from '../leases/service.js';
import { CreateSessionBody, SessionExecBody, SessionParams } from './schema.js';
import type { SessionService } from './service.js';

export interface SessionsRoutesOptions {
  sessions: SessionService;
  calls: Pick<CallService, 'waitFinished'>;
  leases: Pick<LeaseService, 'usable'>;
}

export const sessionsRoutes: FastifyPluginAsync<SessionsRoutesOptions> = async (plugin, { sessions, calls, leases }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['sessions'];

  app.post(
    '/v1/sandboxes/:id/sessions',
    {
      schema: {
        tags,
        summary: 'Start a persistent shell session',
        description:
          "Starts a shell (bash, else sh) as the tool user whose cwd, variables, functions, aliases and activated venv carry over between commands. `201` with the session once its shell runs; `429 session.limit_reached` over the policy's `sessions.max`.",
        params: LeaseParams,
        body: CreateSessionBody,
      },
      config: { lease: 'active' },
    },
    async (request, reply) => reply.status(201).send(await sessions.create(request.lease, request.body)),
  );

  app.get(
    '/v1/sandboxes/:id/sessions',
    { schema: { tags, summary: "The sandbox's shell sessions, running and ended", params: LeaseParams }, config: { lease: 'visible' } },
    async (request) => ({ sessions: await sessions.list(request.params.id) }),
  );

  app.get(
    '/v1/sandboxes/:id/sessions/:sessionId',
    { schema: { tags, summary: 'Read a shell session', params: SessionParams }, config: { lease: 'visible' } },
    async (request) => sessions.get(request.params.id, request.params.sessionId),
  );

  app.delete(
    '/v1/sandboxes/:id/sessions/:sessionId',
    {
      schema: { tags, summary: 'End a shell session: its shell and every process it started are killed', params: SessionParams },
      config: { lease: 'visible' },
    },
    async (request) => sessions.delete(request.lease, request.params.sessionId, (lease) => leases.usable(lease)),
  );

  app.post(
    '/v1/sandboxes/:id/sessions/:sessionId/exec',
    {
      schema: {
        tags,
        summary: 'Run one command in a shell session',
        description:
          'An `exec` call with `session`: commands of one session run one at a time, in the order submitted. The ToolResult (`200`) when it ends within `wait` seconds, else `202 {callId, status}`; `409 session.ended` when the session has ended.',
        params: SessionParams,
        querystring: SubmitCallQuery,
        body: SessionExecBody,
      },
      config: { lease: 'active' },
    },
    async (request, reply) => {
      const { id, sessionId } = request.params;
      const call = await sessions.exec(request.lease, sessionId, request.body);
      const view = request.query.wait ? await calls.waitFinished(id, call.callId, request.query.wait * 1000) : call;
      if (view.status === 'finished' && view.result) return reply.status(200).send(view.result);
      return reply.status(202).send({ callId: view.callId, status: view.status });
    },
  );
};
