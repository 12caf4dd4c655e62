/**
 * Terminal routes: create, list, read, input, resize, delete, the output as Server-Sent Events (the
 * call's events: `id:` = `seq`, `Last-Event-ID` resumes), signed attach URLs for browsers, the
 * WebSocket attach (below), and stdin to a running call (`POST .../calls/:callId/stdin`).
 */
import websocket from '@fastify/websocket';
import { z } from 'zod';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { WebSocket } from 'ws';
import { AppError } from '../../contract/errors.js';
import type { LeaseService } from '../leases/service.js';
import type { Notifier } from '../redis/notifier.js';
import { streamCallEvents } from '../calls/routes.js';
import { CallEventsHeaders } from '../calls/schema.js';
import type { LiveIn } from '../agent-link/live-in.js';
import type { CallStore } from '../calls/store.js';
import { LeaseParams } from '../leases/schema.js';
import {
  AttachQuery,
  CreateTerminalBody,
  MAX_INPUT_BYTES,
  SignedAttachParams,
  StdinBody,
  StdinParams,
  TerminalInputBody,
  TerminalParams,
  TerminalSize,
  TerminalUrlBody,
} from './schema.js';
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
    '/v1/sandboxes/:id/terminals',
    {
      schema: {
        tags,
        summary: "The sandbox's open terminals (starting or running)",
        description: 'An ended terminal is not listed; `GET .../terminals/:terminalId` reads it (and its result).',
        params: LeaseParams,
      },
      config: { lease: 'visible' },
    },
    async (request) => ({ terminals: await terminals.list(request.params.id) }),
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
      await streamCallEvents(request, reply, { store, notifier }, id, terminalId);
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

/**
 * The WebSocket attach of a terminal, two ways in:
 * - `GET /v1/sandboxes/:id/terminals/:terminalId/ws` with an API key in `Authorization`;
 * - `GET /v1/terminal-ws/:id/:terminalId/:token`, the signed URL of `POST .../url` (for browsers,
 *   whose WebSocket cannot send headers): the token is the credential, for this terminal only.
 *
 * Server → client: the output as binary frames, every byte once and in order from `?offset=N`
 * (bytes the client already has; default 0: the whole backlog, so reconnecting with the count
 * of bytes received misses nothing and repeats nothing) — sent as the agent writes them (the
 * live channel) or from the ledger's `output` events, whichever comes first; text frames (JSON)
 * for what is not output: `{"type":"seq","seq":N,"offset":BYTES}` after each ledger batch, `{"type":"truncated","keptBytes":N}` when the
 * backlog bound was reached, and `{"type":"exit","status","exitCode","signal"}` before the
 * server closes (1000) once the terminal ended.
 *
 * Client → server: binary frames are input bytes; text frames are JSON
 * `{"type":"resize","cols":C,"rows":R}` or `{"type":"input","data":"text"}`. A malformed text
 * frame is answered `{"type":"error","code":"input.invalid"}` and changes nothing; frames are
 * applied in the order received.
 */
export interface TerminalSocketOptions {
  terminals: TerminalService;
  live: Pick<LiveIn, 'subscribe'>;
  store: Pick<CallStore, 'notifyChannel' | 'readEvents' | 'getCall'>;
  notifier: Pick<Notifier, 'next'>;
}

/** How long the output loop sleeps without a notification before it reads again, ms. */
const RECHECK_MS = 15_000;

const ClientMessage = z.discriminatedUnion('type', [
  TerminalSize.extend({ type: z.literal('resize') }).strict(),
  z.object({ type: z.literal('input'), data: z.string().max(MAX_INPUT_BYTES) }).strict(),
]);

export const terminalSocket: FastifyPluginAsync<TerminalSocketOptions> = async (plugin, deps) => {
  await plugin.register(websocket, { options: { maxPayload: MAX_INPUT_BYTES } });
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const upgradeOnly = (request: FastifyRequest): void => {
    if (!request.ws)
      throw new AppError('input.invalid', 'this route is a WebSocket: send an Upgrade request', { details: { field: 'upgrade' } });
  };
  app.get(
    '/v1/sandboxes/:id/terminals/:terminalId/ws',
    {
      websocket: true,
      schema: { tags: ['terminals'], summary: 'Attach to a terminal over WebSocket', params: TerminalParams, querystring: AttachQuery },
      config: { lease: 'active' },
      // Refused before the upgrade, as plain HTTP errors: a missing or ended terminal.
      preHandler: async (request) => {
        upgradeOnly(request);
        const { id, terminalId } = request.params as z.infer<typeof TerminalParams>;
        await deps.terminals.open(id, terminalId);
      },
    },
    (socket, request) => attach(deps, socket, request, request.params.id, request.params.terminalId, request.query.offset ?? 0),
  );
  app.get(
    '/v1/terminal-ws/:id/:terminalId/:token',
    {
      websocket: true,
      schema: {
        tags: ['terminals'],
        summary: 'Attach to a terminal over WebSocket by its signed URL (no API key: the token is the credential)',
        params: SignedAttachParams,
        querystring: AttachQuery,
        security: [],
      },
      // Refused before the upgrade: a bad, expired or other terminal's token (401), a lease that
      // may not be used, a missing or ended terminal.
      preHandler: async (request) => {
        upgradeOnly(request);
        const { id, terminalId, token } = request.params as z.infer<typeof SignedAttachParams>;
        const { keyId } = await deps.terminals.grantOf(id, terminalId, token);
        request.log.info({ sandboxId: id, terminalId, keyId }, 'terminal attached by signed URL');
      },
    },
    (socket, request) => attach(deps, socket, request, request.params.id, request.params.terminalId, request.query.offset ?? 0),
  );
};

const NOT_JSON = Symbol('not JSON');

/** Serves one attached socket: output from byte `offset` on, input in the order received. */
function attach(
  { terminals, live, store, notifier }: TerminalSocketOptions,
  socket: WebSocket,
  request: FastifyRequest,
  id: string,
  terminalId: string,
  offset: number,
): void {
  const closed = new AbortController();
  socket.on('close', () => closed.abort());
  const sendJson = (value: unknown): void => {
    if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(value));
  };

  // Input: applied one after the other, in the order the frames arrived.
  let inputs: Promise<void> = Promise.resolve();
  socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    inputs = inputs.then(async () => {
      try {
        if (isBinary) return await terminals.writeBytes(id, terminalId, bytes);
        const json = safeJson(bytes.toString('utf8'));
        if (json === NOT_JSON)
          return sendJson({ type: 'error', code: 'input.invalid', message: 'a text frame must be JSON (input bytes go in binary frames)' });
        const parsed = ClientMessage.safeParse(json);
        if (!parsed.success) {
          const issue = parsed.error.issues[0];
          const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
          return sendJson({ type: 'error', code: 'input.invalid', message: `${where}${issue?.message ?? 'invalid'}` });
        }
        if (parsed.data.type === 'resize') await terminals.resize(id, terminalId, parsed.data, true);
        else await terminals.writeBytes(id, terminalId, Buffer.from(parsed.data.data, 'utf8'));
      } catch (err) {
        request.log.warn({ err }, 'terminal input failed');
        sendJson({ type: 'error', code: 'queue.unavailable', message: (err as Error).message });
      }
    });
  });

  // Output, each byte once by its offset: live chunks as the agent writes them, and the
  // ledger's `output` events (the backlog, and whatever the live channel dropped).
  let sent = offset;
  const sendBytes = (offset: number, data: Buffer): void => {
    const end = offset + data.length;
    if (end <= sent || offset > sent || socket.readyState !== socket.OPEN) return;
    socket.send(data.subarray(sent - offset), { binary: true });
    sent = end;
  };
  void (async () => {
    let seq = 0;
    const channel = store.notifyChannel(id, terminalId);
    const unsubscribe = await live.subscribe(id, terminalId, (chunk) => sendBytes(chunk.offset, chunk.data));
    closed.signal.addEventListener('abort', () => void unsubscribe(), { once: true });
    try {
      while (!closed.signal.aborted) {
        const wake = notifier.next(channel, RECHECK_MS, closed.signal);
        const events = await store.readEvents(id, terminalId, seq);
        let finished = false;
        for (const event of events) {
          seq = event.seq;
          if (event.type === 'output') sendBytes(event.offset, Buffer.from(event.dataBase64, 'base64'));
          else if (event.type === 'output.truncated') sendJson({ type: 'truncated', keptBytes: event.keptBytes });
          else if (event.type === 'call.finished') finished = true;
        }
        if (events.length > 0) sendJson({ type: 'seq', seq, offset: sent });
        if (finished || (events.length === 0 && (await store.getCall(id, terminalId))?.status === 'finished')) {
          const call = await store.getCall(id, terminalId);
          const result = call?.result;
          sendJson({
            type: 'exit',
            status: result?.status ?? null,
            exitCode: result?.exitCode ?? null,
            signal: result?.signal ?? null,
          });
          socket.close(1000, 'terminal ended');
          return;
        }
        await wake;
      }
    } catch (err) {
      request.log.warn({ err }, 'terminal attach ended with an error');
      socket.close(1011, 'internal error');
    } finally {
      await unsubscribe();
    }
  })();
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
}
