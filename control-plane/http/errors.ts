/**
 * The API edge's error mapping, done once: AppErrors keep their catalogue status and code;
 * fastify's own client errors (bad JSON, body too large, bad media type) get catalogue codes;
 * anything else becomes a plain `internal.unexpected` 500 without internals.
 */
import type { FastifyError, FastifyInstance } from 'fastify';
import { ZodError, type ZodType } from 'zod';
import { AppError, errorInfo, type ErrorCode } from '../../contract/errors.js';

const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'input.invalid_json',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'input.invalid_json',
  FST_ERR_CTP_BODY_TOO_LARGE: 'input.body_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'input.unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'input.invalid',
};

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | AppError | Error, request, reply) => {
    if (error instanceof AppError) {
      if (error.status >= 500) request.log.warn({ err: error }, error.code);
      // The rest of an oversized body is not read: close the connection rather than leave it hanging.
      if (error.code === 'input.body_too_large') reply.header('connection', 'close');
      return reply.status(error.status).send({ error: error.toInfo() });
    }
    if (error instanceof ZodError) {
      return reply.status(400).send({ error: errorInfo('input.invalid', 'invalid request', { issues: issuesOf(error, 'body') }) });
    }
    const fe = error as FastifyError;
    const mapped = fe.code ? FASTIFY_CODES[fe.code] : undefined;
    if (mapped) {
      const status = mapped === 'input.body_too_large' ? 413 : mapped === 'input.unsupported_media_type' ? 415 : 400;
      return reply.status(status).send({ error: errorInfo(mapped, fe.message) });
    }
    if (error instanceof SyntaxError && fe.statusCode === 400) {
      return reply.status(400).send({ error: errorInfo('input.invalid_json', error.message) });
    }
    if (fe.statusCode !== undefined && fe.statusCode >= 400 && fe.statusCode < 500) {
      return reply.status(fe.statusCode).send({ error: errorInfo('input.invalid', fe.message) });
    }
    request.log.error({ err: error }, 'unexpected error');
    return reply.status(500).send({ error: errorInfo('internal.unexpected', `internal error (request ${request.id})`) });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.status(404).send({ error: errorInfo('api.route_not_found', `no route ${request.method} ${request.url.split('?')[0]}`) }),
  );
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
  return error.issues.map((i) => ({ path: [part, ...i.path.map(String)].join('.'), message: i.message }));
}
