/**
 * The API edge's error mapping, done once: AppErrors keep their catalogue status and code;
 * the errors of fastify and of Node's HTTP parser (bad JSON, body too large or cut short, bad
 * media type, unparsable requests, oversized headers, unknown routes and methods) get catalogue
 * codes in the one body shape `{error: {code, domain, message, retryability, details}}`;
 * anything else becomes a plain `internal.unexpected` 500 without internals.
 *
 * Three places answer before a route runs, and each is routed through `edgeError`:
 * - `setErrorHandler`: errors of hooks, body parsing, validation and handlers;
 * - `frameworkErrors` (a fastify option): a URL the router cannot decode or a path parameter
 *   over `maxParamLength`;
 * - `clientErrorHandler` (a fastify option): what Node's parser rejects before there is a
 *   request at all (a body cut short by the client's end of stream, a malformed request line,
 *   headers over the limit, a request that took too long); answered on the raw socket.
 */
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import type { Logger } from 'pino';
import { ZodError, type ZodType } from 'zod';
import { AppError, ERROR_CODES, errorInfo, type ErrorCode, type ErrorInfo } from '../../contract/errors.js';

/** Each code fastify or Node's HTTP layer gives an error of the client's, with its catalogue code and the message clients see. */
const EDGE_CODES: Record<string, { code: ErrorCode; message: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: {
    code: 'input.invalid_json',
    message: 'the body is not valid JSON (or holds a __proto__ or constructor.prototype key)',
  },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'input.invalid_json', message: 'the body is empty but Content-Type is application/json' },
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'input.body_too_large', message: 'the body exceeds the size limit of this route' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'input.unsupported_media_type', message: 'this route takes Content-Type: application/json' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'input.malformed_request', message: 'the body length does not match Content-Length' },
  FST_ERR_BAD_URL: { code: 'input.malformed_request', message: 'the URL is not validly percent-encoded' },
  FST_ERR_MAX_PARAM_LENGTH: { code: 'input.url_too_long', message: 'a path segment is longer than 100 characters' },
  // The client closed its end before the body was complete: while fastify read it ('aborted'),
  // or before the parser had a whole request (end of stream in the body).
  ECONNRESET: { code: 'input.body_aborted', message: 'the connection closed before the body was complete' },
  HPE_INVALID_EOF_STATE: { code: 'input.body_aborted', message: 'the connection closed before the body was complete' },
  HPE_HEADER_OVERFLOW: { code: 'input.headers_too_large', message: 'the request line and headers exceed the size limit' },
  ERR_HTTP_REQUEST_TIMEOUT: { code: 'input.request_timeout', message: 'the request did not arrive in time' },
};

/** What an error becomes at the edge: the status and the body. */
function edgeError(error: unknown, requestId: string, log: Pick<Logger, 'warn' | 'error'>): { status: number; body: { error: ErrorInfo } } {
  if (error instanceof AppError) {
    if (error.status >= 500) log.warn({ err: error }, error.code);
    return { status: error.status, body: { error: error.toInfo() } };
  }
  if (error instanceof ZodError) return answer('input.invalid', 'invalid request', { issues: issuesOf(error, 'body') });
  const edge = edgeCodeOf(error);
  if (edge) return answer(edge.code, edge.message, edge.details);
  // A client error of a library's own (http-errors from static file serving: a `..` path is
  // 403, an unsatisfiable Range 416) keeps its status; `expose` marks its message as meant for clients.
  const { statusCode, expose } = error as { statusCode?: unknown; expose?: unknown };
  if (typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500) {
    const message = expose === true ? (error as Error).message : (STATUS_CODES[statusCode] ?? 'client error');
    return { status: statusCode, body: { error: errorInfo('input.invalid', message) } };
  }
  log.error({ err: error }, 'unexpected error');
  return answer('internal.unexpected', `internal error (request ${requestId})`);
}

/**
 * The catalogue code of an error that fastify or Node's HTTP parser raised for a client's
 * request (bad JSON, a body too large, an unparsable request...), or null when `error` is none
 * of those. For the E2B-compatible API too, which answers them in E2B's shape (e2b/routes.ts).
 */
export function edgeCodeOf(error: unknown): { code: ErrorCode; message: string; details?: Record<string, unknown> } | null {
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string') return null;
  const known = EDGE_CODES[code];
  if (known) return known;
  // Node's parser names every other request it cannot parse HPE_* (bad request line, header
  // syntax, chunk encoding, Content-Length): the client's fault, not the server's.
  if (code.startsWith('HPE_'))
    return { code: 'input.malformed_request', message: 'the HTTP request could not be parsed', details: { reason: code } };
  return null;
}

function answer(code: ErrorCode, message: string, details?: Record<string, unknown>): { status: number; body: { error: ErrorInfo } } {
  return { status: ERROR_CODES[code].status, body: { error: errorInfo(code, message, details) } };
}

/**
 * Answers `error` on a raw response, in the same status and body as the error handler would:
 * for requests served ahead of fastify's router (previews/fast-path.ts). A response already
 * begun cannot take an error any more and is cut instead.
 */
export function answerRawError(res: ServerResponse, error: unknown, requestId: string, log: Pick<Logger, 'warn' | 'error'>): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const { status, body } = edgeError(error, requestId, log);
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Connections whose current request was answered before its body had arrived (a refusal on the
 * headers alone: 401, 415...). Node reads the rest of such a body to keep the connection; when it
 * never comes, the request timeout must end the connection without a second, unasked answer.
 */
const answeredBeforeBody = new WeakSet<Socket>();

/**
 * Tracks, on `server`, which connections' current request was answered before its body arrived
 * (for `clientErrorHandler`). Call once the server exists.
 */
export function trackAnswersBeforeBody(server: Server): void {
  server.prependListener('request', (request: IncomingMessage, response: ServerResponse) => {
    answeredBeforeBody.delete(request.socket);
    response.once('finish', () => {
      if (!request.complete) answeredBeforeBody.add(request.socket);
    });
  });
}

/** The fastify constructor options that route framework and parser errors through the edge. */
export function edgeServerOptions(log: Logger): {
  frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void;
  clientErrorHandler: (error: Error & { code?: string }, socket: Socket) => void;
} {
  return {
    frameworkErrors(error, request, reply) {
      const { status, body } = edgeError(error, request.id, request.log);
      void reply.status(status).send(body);
    },
    clientErrorHandler(error, socket) {
      // A reset socket is gone: nobody is there to answer (Node's documented advice).
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      // Its request was answered already: the timeout of the body that never came ends it, unanswered.
      if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT' && answeredBeforeBody.has(socket)) return void socket.destroy();
      const { status, body } = edgeError(error, 'none', log);
      // A response already begun on this socket cannot take a second one (Node's own check).
      const begun = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
      if (!socket.writable || begun) return void socket.destroy();
      const text = JSON.stringify(body);
      const head = `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n`;
      // End, then destroy once written: the parser is gone, so nothing more is read from it.
      socket.end(head + text, () => socket.destroy());
    },
  };
}

/**
 * Installs the error handler and the not-found handler. A path that some route has under other
 * methods answers `405 api.method_not_allowed` with `Allow` (and `details.allow`); a path no
 * route has answers `404 api.route_not_found`. Call before routes are registered: an `onRoute`
 * hook collects them into a router of the same kind as fastify's, to look up other methods.
 */
export function installErrorHandling(app: FastifyInstance): void {
  const known = FindMyWay();
  const methods = new Set<HTTPMethod>();
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat() as HTTPMethod[]) {
      methods.add(method);
      if (!known.hasRoute(method, route.url)) known.on(method, route.url, () => undefined);
    }
  });
  app.setErrorHandler((error: FastifyError | AppError | Error, request, reply) => {
    const { status, body } = edgeError(error, request.id, request.log);
    if (body.error.code === 'input.body_too_large') {
      // The limit it passed, for the client to size its next request by.
      body.error.details ??= { maxBytes: request.routeOptions.bodyLimit };
      // The rest of an oversized body is not read: close the connection rather than leave it hanging.
      reply.header('connection', 'close');
    }
    return reply.status(status).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allow = [...methods].filter((m) => m !== request.method && known.find(m, path) !== null).sort();
    if (allow.length > 0) {
      return reply
        .status(405)
        .header('allow', allow.join(', '))
        .send({
          error: errorInfo('api.method_not_allowed', `${path} does not take ${request.method}; it takes ${allow.join(', ')}`, { allow }),
        });
    }
    return reply.status(404).send({ error: errorInfo('api.route_not_found', `no route ${request.method} ${path}`) });
  });
}

/**
 * Parses one part of a request (`body`, `query`, `params`, `headers`) with a zod schema.
 * Throws AppError `input.invalid` whose `details.issues` name each bad field as `part.path`.
 */
export function parseInput<T extends ZodType>(schema: T, value: unknown, part: string): ReturnType<T['parse']> {
  const result = schema.safeParse(value);
  if (result.success) return result.data as ReturnType<T['parse']>;
  const issues = issuesOf(result.error, part);
  throw new AppError('input.invalid', issues.map((i) => `${i.path}: ${i.message}`).join('; '), { details: { issues } });
}

function issuesOf(error: ZodError, part: string): Array<{ path: string; message: string }> {
  return error.issues.map((i) => ({ path: [part, ...i.path.map(String)].join('.'), message: messageOf(i) }));
}

/**
 * An issue's message for the caller. A query or path value that is not a number reaches a
 * `z.coerce.number()` schema as NaN, and zod says "received NaN": the caller sent text, so say
 * what was expected instead.
 */
function messageOf(issue: ZodError['issues'][number]): string {
  if (issue.code === 'invalid_type' && (issue as { received?: unknown }).received === 'NaN')
    return `Invalid input: expected a ${issue.expected}`;
  return issue.message;
}
