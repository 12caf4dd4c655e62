import websocket from '@fastify/websocket';
import { z } from 'zod';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { WebSocket } from 'ws';
import { AppError } from '../../contract/errors.js';
import type { LiveIn } from '../agent-link/live-in.js';
import type { CallStore } from '../calls/store.js';
import type { Notifier } from '../redis/notifier.js';
import { AttachQuery, MAX_INPUT_BYTES, SignedAttachParams, TerminalParams, TerminalSize } from './schema.js';
import type { TerminalService } from './service.js';

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
        const parsed = ClientMessage.safeParse(safeJson(bytes.toString('utf8')));
        if (!parsed.success)
          return sendJson({ type: 'error', code: 'input.invalid', message: parsed.error.issues[0]?.message ?? 'invalid' });
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
    return null;
  }
}
