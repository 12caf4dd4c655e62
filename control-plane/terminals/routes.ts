/**
 * Terminal routes: create, read, input, resize, delete, the output as Server-Sent Events (the
 * call's events: `id:` = `seq`, `Last-Event-ID` resumes), signed attach URLs for browsers, the
 * WebSocket attach (socket.ts), and stdin to a running call (`POST .../calls/:callId/stdin`).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { streamSse } from '../http/sse.js';
import type { LeaseService } from '../leases/service.js';
import type { Notifier } from '../redis/notifier.js';
import { CallEventsHeaders } from '../calls/schema.js';
import type { LiveIn } from '../agent-link/live-in.js';
import { terminalSocket } from './socket.js';
import type { CallStore } from '../calls/store.js';
import { LeaseParams } from '../leases/schema.js';
import { CreateTerminalBody, StdinBody, StdinParams, TerminalInputBody, TerminalParams, TerminalSize, TerminalUrlBody } from './schema.js';
import type { TerminalService } from './service.js';

export interface TerminalsRoutesOptions {
  terminals: TerminalService;
  live: Pick<LiveIn, 'subscribe'>;
  leases: Pick<LeaseService, 'usable'>;
  store: Pick<CallStore, 'notifyChannel' | 'readEvents' | 'getCall'>;
  notifier: Pick<Notifier, 'next'>;
}

export const terminalsRoutes: FastifyPluginAsync<TerminalsRoutesOptions> = async (plugin, { terminals, live, leases, store, notifier }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['terminals'];

  app.post(
    '/v1/sandboxes/:id/terminals',
    {
      schema: {
        tags,
        summary: 'Start a terminal (a program on a pseudo-terminal; default the login shell)',
        description:
          "`201` with the terminal once its program runs. Over the policy's `terminals.max` is `429 terminal.limit_reached`. The terminal is a call (its id is the callId): its events, receipt and transcript artifact are the calls API's too.",
        params: LeaseParams,
        body: CreateTerminalBody,
      },
      config: { lease: 'active' },
    },
    async (request, reply) => reply.status(201).send(await terminals.create(request.lease, request.body)),
  );

  app.get(
    '/v1/sandboxes/:id/terminals/:terminalId',
    {
      schema: { tags, summary: 'Read a terminal: status, exit code and signal, result with receipt', params: TerminalParams },
      config: { lease: 'visible' },
    },
    async (request) => terminals.get(request.params.id, request.params.terminalId),
  );

  app.post(
    '/v1/sandboxes/:id/terminals/:terminalId/input',
    {
      schema: {
        tags,
        summary: 'Send input to a terminal',
        description: 'Ended terminal: `409 terminal.closed`.',
        params: TerminalParams,
        body: TerminalInputBody,
      },
      config: { lease: 'active' },
      bodyLimit: 2 * 1024 * 1024,
    },
    async (request, reply) => {
      await terminals.write(request.params.id, request.params.terminalId, request.body);
      return reply.status(204).send();
    },
  );

  app.post(
    '/v1/sandboxes/:id/terminals/:terminalId/resize',
    {
      schema: { tags, summary: "Resize a terminal's window (cols and rows, 1..1000)", params: TerminalParams, body: TerminalSize },
      config: { lease: 'active' },
    },
    async (request, reply) => {
      await terminals.resize(request.params.id, request.params.terminalId, request.body);
      return reply.status(204).send();
    },
  );

  app.delete(
    '/v1/sandboxes/:id/terminals/:terminalId',
    {
      schema: {
        tags,
        summary: 'Close a terminal: hang up and kill its session',
        description: '`202` while it ends (its result follows as `cancelled`); an ended terminal is `200`, unchanged.',
        params: TerminalParams,
      },
      config: { lease: 'visible' },
    },
    async (request, reply) => {
      const view = await terminals.close(request.lease, request.params.terminalId, (lease) => leases.usable(lease));
      return reply.status(view.status === 'exited' ? 200 : 202).send(view);
    },
  );

  app.get(
    '/v1/sandboxes/:id/terminals/:terminalId/events',
    {
      schema: {
        tags,
        summary: "The terminal's output and life as Server-Sent Events",
        description:
          '`output` events carry the bytes (`dataBase64`); `id:` is the gap-free `seq`, reconnect with `Last-Event-ID`. Ends after `call.finished`.',
        params: TerminalParams,
        headers: CallEventsHeaders,
      },
      config: { lease: 'visible' },
    },
    async (request, reply) => {
      const { id, terminalId } = request.params;
      await terminals.get(id, terminalId);
      await streamSse(
        request,
        reply,
        notifier,
        {
          channel: store.notifyChannel(id, terminalId),
          read: (seq) => store.readEvents(id, terminalId, seq),
          isTerminal: (event) => event.type === 'call.finished',
          ended: async () => (await store.getCall(id, terminalId))?.status === 'finished',
        },
        Number(request.headers['last-event-id'] ?? 0),
      );
    },
  );

  app.post(
    '/v1/sandboxes/:id/terminals/:terminalId/url',
    {
      schema: {
        tags,
        summary: 'A signed WebSocket URL of a terminal, for browsers (no API key needed to open it)',
        description:
          "A browser's WebSocket cannot send `Authorization`: this URL carries a token instead, HMAC-signed over the sandbox, this terminal and the expiry (`expiresInSeconds`, default 300, at most a day and never past the sandbox's `expiresAt`). It opens this terminal only; expired or tampered: `401 terminal.url_expired` / `terminal.url_invalid`. The attach is the same as `.../ws` (append `?offset=`).",
        params: TerminalParams,
        body: TerminalUrlBody,
      },
      config: { lease: 'active' },
    },
    async (request) =>
      terminals.mintUrl(request.lease, request.params.terminalId, request.principal, request.body.expiresInSeconds, {
        protocol: request.protocol,
        host: request.host,
      }),
  );

  await app.register(terminalSocket, { terminals, live, store, notifier });

  app.post(
    '/v1/sandboxes/:id/calls/:callId/stdin',
    {
      schema: {
        tags: ['calls'],
        summary: 'Write to the stdin of a running call started with `stdin: "pipe"`',
        description: 'Bytes in order; `eof: true` closes stdin after them. A finished call is `409 call.finished`.',
        params: StdinParams,
        body: StdinBody,
      },
      config: { lease: 'active' },
      bodyLimit: 2 * 1024 * 1024,
    },
    async (request, reply) => {
      await terminals.stdin(request.params.id, request.params.callId, request.body);
      return reply.status(204).send();
    },
  );
};
