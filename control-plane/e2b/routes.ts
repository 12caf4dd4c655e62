/**
 * The E2B-compatible API (issue 17 part 1), two fastify plugins:
 * - `e2bApiRoutes` at `/e2b/api` (`E2B_API_URL`): the control API, REST/JSON, `X-API-KEY` an sbx
 *   API key; errors `{code: <HTTP status>, message}` as E2B's OpenAPI document has them.
 * - `e2bEnvdRoutes` at `/e2b/envd` (`E2B_SANDBOX_URL`): the in-sandbox API — Connect RPC
 *   (`/process.Process/*`, `/filesystem.Filesystem/*`, JSON codec) and `/files`, `/health` —
 *   for the sandbox in `E2b-Sandbox-Id`, with the `X-Access-Token` create or connect answered.
 * Both are outside sbx's `/v1` auth hook (app.ts `publicRoutes`): each authenticates itself.
 */
import busboy from 'busboy';
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AppError, ERROR_CODES } from '../../contract/errors.js';
import { edgeCodeOf } from '../http/errors.js';
import type { Authenticate, Principal } from '../http/auth.js';
import type { LeaseRecord } from '../leases/store.js';
import {
  CONNECT_HTTP_STATUS,
  ConnectError,
  MAX_REQUEST_MESSAGE_BYTES,
  endStream,
  parseJson,
  readEnvelope,
  toConnectError,
} from './connect.js';
import type { E2bFilesystem } from './filesystem.js';
import type { E2bProcesses } from './processes.js';
import type { E2bSandboxes } from './sandboxes.js';
import type { E2bWatch } from './watch.js';
import {
  CloseStdinRequest,
  ConnectRequest,
  ConnectSandbox,
  ListDirRequest,
  ListSandboxesQuery,
  MoveRequest,
  NewSandbox,
  PathRequest,
  SandboxTimeout,
  SendInputRequest,
  SendSignalRequest,
  StartRequest,
  UpdateRequest,
  WatchDirRequest,
} from './schema.js';

/** Largest file one `POST /files` part may carry, bytes (sbx's write_file takes 32 MiB of base64; the policy's `maxFileBytes` may say less). */
const MAX_UPLOAD_FILE_BYTES = 24 * 1024 * 1024;
/** Largest multipart upload, all parts together, bytes: held in memory until every part is in. */
const MAX_UPLOAD_TOTAL_BYTES = 64 * 1024 * 1024;
/** Most files in one upload. */
const MAX_UPLOAD_FILES = 1000;

/** Keeps a route out of sbx's OpenAPI document: E2B's protocol is specified by E2B (docs/e2b.md). */
function hideFromOpenApi(route: { schema?: object }): void {
  route.schema = { ...route.schema, hide: true };
}

/** `schema.parse(value)`, its issues as one `invalid` error of `kind` (AppError input.invalid for REST, ConnectError for RPC). */
function parseWith<T>(schema: z.ZodType<T>, value: unknown, rpc: boolean): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const message = parsed.error.issues.map((i) => `${i.path.join('.') || 'message'}: ${i.message}`).join('; ');
  throw rpc ? new ConnectError('invalid_argument', message) : new AppError('input.invalid', message);
}

/** An error as E2B's control API answers it: `{code, message}` with that HTTP status. */
function restError(err: unknown): { status: number; body: { code: number; message: string } } {
  if (err instanceof AppError) {
    const message = err.code === 'policy.not_found' ? `template not found: ${err.message}` : `${err.code}: ${err.message}`;
    return { status: err.status, body: { code: err.status, message } };
  }
  // Framework errors (bad JSON, a body too large...) carry sbx's code in the message too.
  const edge = edgeCodeOf(err);
  if (edge) {
    const edgeStatus = ERROR_CODES[edge.code].status;
    return { status: edgeStatus, body: { code: edgeStatus, message: `${edge.code}: ${edge.message}` } };
  }
  const status = (err as FastifyError).statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500)
    return { status, body: { code: status, message: (err as Error).message } };
  return { status: 500, body: { code: 500, message: 'internal error' } };
}

/** The request's body, `{}` when none was sent (a body of JSON `null` stays null: the schema refuses it, as it refuses `[]`). */
const bodyOrNone = (request: FastifyRequest): unknown => (request.body === undefined ? {} : request.body);

/** Metadata filters as the SDK sends them (`k=v&k2=v2`, each part percent-encoded once more). */
function metadataFilter(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(text ?? '')) {
    try {
      out[decodeURIComponent(k)] = decodeURIComponent(v);
    } catch {
      throw new AppError('input.invalid', 'metadata: not percent-encoded key=value pairs');
    }
  }
  return out;
}

export interface E2bApiOptions {
  authenticate: Authenticate;
  sandboxes: E2bSandboxes;
}

export const e2bApiRoutes: FastifyPluginAsync<E2bApiOptions> = async (app, { authenticate, sandboxes }) => {
  app.addHook('onRoute', hideFromOpenApi);
  const principals = new WeakMap<FastifyRequest, Principal>();
  app.addHook('preHandler', async (request) => {
    const key = request.headers['x-api-key'];
    try {
      principals.set(request, await authenticate(typeof key === 'string' && key !== '' ? `Bearer ${key}` : undefined));
    } catch (err) {
      // E2B clients send the key as X-API-KEY (E2B_API_KEY): say so, not sbx's Authorization header.
      if (err instanceof AppError && err.code === 'auth.missing_api_key') throw new AppError(err.code, 'send X-API-KEY: <an sbx API key>');
      throw err;
    }
  });
  app.setErrorHandler((err, request, reply) => {
    const { status, body } = restError(err);
    if (status >= 500) request.log.error({ err }, 'e2b api request failed');
    return reply.status(status).send(body);
  });
  const by = (request: FastifyRequest): Principal => principals.get(request)!;
  const id = (request: FastifyRequest): string => (request.params as { id: string }).id;

  for (const path of ['/v2/sandboxes', '/sandboxes']) {
    app.post(path, async (request, reply) =>
      reply.status(201).send(await sandboxes.create(parseWith(NewSandbox, bodyOrNone(request), false), by(request))),
    );
    app.get(path, async (request, reply) => {
      const query = parseWith(ListSandboxesQuery, request.query, false);
      const states = query.state ? new Set(query.state.split(',').map((s) => s.trim())) : null;
      const after = query.startedAfter === undefined ? null : Date.parse(query.startedAfter);
      const all = (await sandboxes.list(by(request), { metadata: metadataFilter(query.metadata), states })).filter(
        (s) => (query.template === undefined || s.templateID === query.template) && (after === null || Date.parse(s.startedAt) >= after),
      );
      // Pages by offset: x-next-token names the next one, absent on the last (as E2B's paginator reads it).
      const offset = Number(query.nextToken ?? 0);
      if (offset + query.limit < all.length) reply.header('x-next-token', String(offset + query.limit));
      return all.slice(offset, offset + query.limit);
    });
    app.post(`${path}/:id/connect`, async (request, reply) => {
      const { timeout } = parseWith(ConnectSandbox, bodyOrNone(request), false);
      const { sandbox, resumed } = await sandboxes.connect(id(request), by(request), timeout);
      return reply.status(resumed ? 201 : 200).send(sandbox);
    });
  }
  app.get('/sandboxes/:id', async (request) => sandboxes.info(id(request), by(request)));
  app.post('/sandboxes/:id/timeout', async (request, reply) => {
    await sandboxes.setTimeout(id(request), by(request), parseWith(SandboxTimeout, request.body, false).timeout);
    return reply.status(204).send();
  });
  app.delete('/sandboxes/:id', async (request, reply) => {
    await sandboxes.kill(id(request), by(request));
    return reply.status(204).send();
  });
  app.post('/sandboxes/:id/snapshots', async (request, reply) =>
    reply.status(201).send(await sandboxes.createSnapshot(id(request), by(request))),
  );
  app.get('/snapshots', async (request) => {
    const { sandboxID } = parseWith(z.object({ sandboxID: z.string().max(128).optional() }).loose(), request.query, false);
    return sandboxes.listSnapshots(by(request), sandboxID);
  });
  app.delete('/templates/:id', async (request, reply) => {
    await sandboxes.deleteSnapshot(id(request), by(request));
    return reply.status(204).send();
  });
  app.post('/sandboxes/:id/pause', async (request, reply) => {
    if (!(await sandboxes.pause(id(request), by(request))))
      return reply.status(409).send({ code: 409, message: `sandbox ${id(request)} is paused already` });
    return reply.status(204).send();
  });
};

export interface E2bEnvdOptions {
  sandboxes: E2bSandboxes;
  processes: E2bProcesses;
  filesystem: E2bFilesystem;
  watch: E2bWatch;
}

/** The lease an envd request is for (E2b-Sandbox-Id, X-Access-Token). */
function leaseOf(sandboxes: E2bSandboxes, request: FastifyRequest): Promise<LeaseRecord> {
  const id = request.headers['e2b-sandbox-id'];
  const token = request.headers['x-access-token'];
  if (typeof id !== 'string' || id === '') throw new AppError('envd.token_invalid', 'send the sandbox id in E2b-Sandbox-Id');
  return sandboxes.envdLease(id, typeof token === 'string' ? token : undefined);
}

/** A Connect client's deadline (`Connect-Timeout-Ms`), or null. */
function deadlineOf(request: FastifyRequest): number | null {
  const value = Number(request.headers['connect-timeout-ms']);
  return Number.isInteger(value) && value > 0 ? Math.min(value, 2_147_483_647) : null;
}

export const e2bEnvdRoutes: FastifyPluginAsync<E2bEnvdOptions> = async (app, { sandboxes, processes, filesystem, watch }) => {
  app.addHook('onRoute', hideFromOpenApi);
  app.removeAllContentTypeParsers();
  // Multipart bodies are read by busboy from the request itself; everything else as bytes.
  app.addContentTypeParser('multipart/form-data', (_request, _payload, done) => done(null));
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: MAX_REQUEST_MESSAGE_BYTES + 5 }, (_request, body, done) =>
    done(null, body),
  );
  app.setErrorHandler((err, request, reply) => {
    const path = request.url.split('?')[0];
    if (path === `${app.prefix}/files` || path === `${app.prefix}/health`) {
      // envd's REST errors: `{code: <HTTP status>, message}`.
      if (err instanceof ConnectError) {
        const status = CONNECT_HTTP_STATUS[err.code];
        return reply.status(status).send({ code: status, message: err.message });
      }
      const { status, body } = restError(err);
      return reply.status(status).send(body);
    }
    const connect = toConnectError(err);
    if (connect.code === 'internal') request.log.error({ err }, 'envd request failed');
    return reply.status(CONNECT_HTTP_STATUS[connect.code]).type('application/json').send({ code: connect.code, message: connect.message });
  });

  const unary = (path: string, handle: (lease: LeaseRecord, message: unknown) => Promise<unknown>): void => {
    app.post(path, async (request, reply) => {
      const lease = await leaseOf(sandboxes, request);
      const answer = await handle(lease, parseJson((request.body as Buffer | undefined) ?? Buffer.alloc(0)));
      return reply.type('application/json').send(answer ?? {});
    });
  };
  // Open streams end when the app closes (a command or watch goes on; its client is told `unavailable`).
  const open = new Set<AbortController>();
  let stopping = false;
  app.addHook('preClose', async () => {
    stopping = true;
    for (const stream of open) stream.abort();
  });
  const streaming = (
    path: string,
    handle: (lease: LeaseRecord, message: unknown, request: FastifyRequest, reply: FastifyReply, closed: AbortSignal) => Promise<void>,
  ): void => {
    app.post(path, async (request, reply) => {
      // Streams answer 200 and carry their error in the end-stream message (Connect protocol).
      const closed = new AbortController();
      open.add(closed);
      reply.hijack();
      reply.raw.on('close', () => closed.abort());
      reply.raw.writeHead(200, { 'content-type': 'application/connect+json' });
      try {
        if (stopping) throw new ConnectError('unavailable', 'the control plane is stopping');
        const lease = await leaseOf(sandboxes, request);
        await handle(lease, readEnvelope((request.body as Buffer | undefined) ?? Buffer.alloc(0)), request, reply, closed.signal);
      } catch (err) {
        if (!reply.raw.writableEnded) reply.raw.end(endStream(toConnectError(err)));
      } finally {
        open.delete(closed);
        // Ended by the app's close, not by the client: say so (the services end only streams they finished).
        if (!reply.raw.writableEnded && !reply.raw.destroyed)
          reply.raw.end(endStream(new ConnectError('unavailable', 'the control plane is stopping')));
      }
    });
  };

  streaming('/process.Process/Start', (lease, m, request, reply, closed) =>
    processes.start(lease, parseWith(StartRequest, m, true), deadlineOf(request), reply.raw, closed),
  );
  streaming('/process.Process/Connect', (lease, m, _request, reply, closed) =>
    processes.connect(lease, parseWith(ConnectRequest, m, true).process.pid, reply.raw, closed),
  );
  streaming('/filesystem.Filesystem/WatchDir', (lease, m, _request, reply, closed) => {
    const { path, recursive } = parseWith(WatchDirRequest, m, true);
    return watch.watchDir(lease, path, recursive, reply.raw, closed);
  });
  unary('/process.Process/List', async (lease) => ({ processes: await processes.list(lease) }));
  unary('/process.Process/SendSignal', async (lease, m) => processes.signal(lease, parseWith(SendSignalRequest, m, true).process.pid));
  unary('/process.Process/SendInput', async (lease, m) => {
    const { process, input } = parseWith(SendInputRequest, m, true);
    await processes.input(lease, process.pid, { dataBase64: 'stdin' in input ? input.stdin : input.pty, eof: false });
  });
  unary('/process.Process/CloseStdin', async (lease, m) =>
    processes.input(lease, parseWith(CloseStdinRequest, m, true).process.pid, { eof: true }),
  );
  unary('/process.Process/Update', async (lease, m) => {
    const { process, pty } = parseWith(UpdateRequest, m, true);
    await processes.resize(lease, process.pid, pty.size);
  });
  unary('/filesystem.Filesystem/Stat', async (lease, m) => ({ entry: await filesystem.stat(lease, parseWith(PathRequest, m, true).path) }));
  unary('/filesystem.Filesystem/MakeDir', async (lease, m) => ({
    entry: await filesystem.makeDir(lease, parseWith(PathRequest, m, true).path),
  }));
  unary('/filesystem.Filesystem/Move', async (lease, m) => {
    const { source, destination } = parseWith(MoveRequest, m, true);
    return { entry: await filesystem.move(lease, source, destination) };
  });
  unary('/filesystem.Filesystem/ListDir', async (lease, m) => {
    const { path, depth } = parseWith(ListDirRequest, m, true);
    return { entries: await filesystem.listDir(lease, path, depth) };
  });
  unary('/filesystem.Filesystem/Remove', async (lease, m) => filesystem.remove(lease, parseWith(PathRequest, m, true).path));
  app.post('/:service/:method', async (request) => {
    const { service, method } = request.params as { service: string; method: string };
    throw new ConnectError('unimplemented', `${service}/${method} is not offered`);
  });

  app.get('/health', async (request, reply) => {
    await leaseOf(sandboxes, request);
    return reply.status(204).send();
  });
  app.get('/files', async (request, reply) => {
    const lease = await leaseOf(sandboxes, request);
    const { path } = parseWith(z.object({ path: z.string().min(1).max(4096) }), request.query, false);
    return reply.type('application/octet-stream').send(await filesystem.read(lease, path));
  });
  app.post('/files', async (request) => {
    const lease = await leaseOf(sandboxes, request);
    const { path } = parseWith(z.object({ path: z.string().min(1).max(4096).optional() }), request.query, false);
    if (!String(request.headers['content-type'] ?? '').startsWith('multipart/form-data')) {
      if (!path) throw new AppError('input.invalid', 'path: required for a body that is not multipart');
      return [await filesystem.write(lease, path, request.body as Buffer)];
    }
    const files = await readParts(request, path);
    const written = [];
    for (const file of files) written.push(await filesystem.write(lease, file.path, file.bytes));
    return written;
  });
};

/**
 * The files of a multipart upload: each part's filename is its path (the `path` query names a
 * single file's). Bounded: a part over MAX_UPLOAD_FILE_BYTES, parts over MAX_UPLOAD_TOTAL_BYTES
 * together or more than MAX_UPLOAD_FILES refuse the whole upload (`input.body_too_large`) before
 * anything is written, and stop reading it; a body without a file is `input.invalid`.
 */
function readParts(request: FastifyRequest, path: string | undefined): Promise<Array<{ path: string; bytes: Buffer }>> {
  return new Promise((resolve, reject) => {
    const files: Array<{ path: string; bytes: Buffer }> = [];
    let totalBytes = 0;
    let failed = false;
    let parser: busboy.Busboy;
    try {
      // The filename is the destination path: kept whole (busboy keeps only its last part by default).
      parser = busboy({
        headers: request.headers,
        preservePath: true,
        limits: { fileSize: MAX_UPLOAD_FILE_BYTES, files: MAX_UPLOAD_FILES, fields: 0 },
      });
    } catch (err) {
      reject(new AppError('input.invalid', `not a multipart body: ${(err as Error).message}`));
      return;
    }
    const fail = (err: AppError): void => {
      if (failed) return;
      failed = true;
      files.length = 0;
      // Read to nothing (the client is answered at once, its connection stays usable).
      request.raw.unpipe(parser);
      request.raw.resume();
      reject(err);
    };
    parser.on('file', (_field, stream, info) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => {
        totalBytes += c.length;
        if (totalBytes > MAX_UPLOAD_TOTAL_BYTES)
          fail(
            new AppError('input.body_too_large', `the files are over ${MAX_UPLOAD_TOTAL_BYTES} bytes together`, {
              details: { maxBytes: MAX_UPLOAD_TOTAL_BYTES },
            }),
          );
        else if (!failed) chunks.push(c);
      });
      stream.on('limit', () => fail(new AppError('input.body_too_large', `a file is over ${MAX_UPLOAD_FILE_BYTES} bytes`)));
      stream.on('close', () => {
        const target = path ?? info.filename;
        if (failed) return;
        if (!target) fail(new AppError('input.invalid', 'a part has no filename and no path was given'));
        else files.push({ path: target, bytes: Buffer.concat(chunks) });
      });
    });
    parser.on('filesLimit', () => fail(new AppError('input.body_too_large', `more than ${MAX_UPLOAD_FILES} files in one upload`)));
    parser.on('error', (err: Error) => fail(new AppError('input.invalid', `not a multipart body: ${err.message}`)));
    parser.on('close', () => {
      if (failed) return;
      if (files.length === 0) reject(new AppError('input.invalid', 'the upload has no file part'));
      else resolve(files);
    });
    request.raw.pipe(parser);
  });
}
