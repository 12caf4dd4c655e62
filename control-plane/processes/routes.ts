/**
 * Process routes: `GET /v1/sandboxes/:id/processes` (the process table) and
 * `POST /v1/sandboxes/:id/processes/:pid/signal` (one signal to one of the tool user's
 * processes). Both run a process tool call (see service.ts) and answer its result, or
 * `202 {callId, status}` when the agent has not answered within the wait.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { LeaseParams } from '../leases/schema.js';
import { ProcessParams, SignalBody } from './schema.js';
import type { ProcessService } from './service.js';

export interface ProcessesRoutesOptions {
  processes: ProcessService;
}

export const processesRoutes: FastifyPluginAsync<ProcessesRoutesOptions> = async (plugin, { processes }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['processes'];

  app.get(
    '/v1/sandboxes/:id/processes',
    {
      schema: {
        tags,
        summary: "The sandbox's processes",
        description:
          "Every process: pid, ppid, user, command, owner (the call, session or terminal it belongs to), CPU time (ms), RSS (bytes) and whether it may be signalled (`killable`: the tool user's; init, the agent and its worker are not). Read by a `list_processes` call (`callId`, `receiptId`); `202 {callId, status}` when the agent did not answer within 30 s.",
        params: LeaseParams,
      },
      config: { lease: 'active' },
    },
    async (request, reply) => {
      const answer = await processes.list(request.lease);
      return reply.status('processes' in answer ? 200 : 202).send(answer);
    },
  );

  app.post(
    '/v1/sandboxes/:id/processes/:pid/signal',
    {
      schema: {
        tags,
        summary: "Signal one of the tool user's processes",
        description:
          "Sends `signal` (default SIGTERM) by a `signal_process` call (a receipt; audited as `process.signal` with who sent it). A process that is not the tool user's (init, the agent, its worker) is `403 process.not_killable`, an unknown pid `404 process.not_found`, a signal name not in the list `400 input.invalid`. `202 {callId, status}` when the agent did not answer within 30 s.",
        params: ProcessParams,
        body: SignalBody,
      },
      config: { lease: 'active' },
    },
    async (request, reply) => {
      const answer = await processes.signal(request.lease, request.params.pid, request.body.signal, request.principal);
      return reply.status('pid' in answer ? 200 : 202).send(answer);
    },
  );
};
