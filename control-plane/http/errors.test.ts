import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorBody } from '../../contract/errors.js';
import { edgeServerOptions, installErrorHandling } from './errors.js';

let app: FastifyInstance;

beforeAll(async () => {
  const log = pino({ level: 'silent' });
  app = Fastify({ loggerInstance: log as FastifyBaseLogger, ...edgeServerOptions(log) });
  installErrorHandling(app);
  app.get('/things/:id', async () => ({ ok: true }));
  app.post('/things/:id', async (request) => request.body);
  app.get('/boom', async () => {
    throw new Error('secret internals at /srv/x.js:1');
  });
  app.get('/range', async () => {
    throw Object.assign(new Error('Range Not Satisfiable'), { statusCode: 416, expose: true });
  });
  await app.ready();
});
afterAll(async () => app.close());

async function errorOf(
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  url: string,
  payload?: string,
): Promise<{ status: number; code: string; allow?: string; message: string }> {
  const r = await app.inject({ method, url, payload, headers: payload === undefined ? {} : { 'content-type': 'application/json' } });
  const body = ErrorBody.parse(r.json());
  return { status: r.statusCode, code: body.error.code, allow: r.headers.allow as string | undefined, message: body.error.message };
}

describe('the error edge', () => {
  it('a known path under another method is 405 with Allow; an unknown path is 404', async () => {
    expect(await errorOf('PATCH', '/things/7')).toMatchObject({ status: 405, code: 'api.method_not_allowed', allow: 'GET, HEAD, POST' });
    expect(await errorOf('DELETE', '/things/7?x=1')).toMatchObject({ status: 405, allow: 'GET, HEAD, POST' });
    expect(await errorOf('GET', '/things/7/more')).toMatchObject({ status: 404, code: 'api.route_not_found' });
  });

  it("fastify's own client errors get catalogue codes and statuses", async () => {
    expect(await errorOf('POST', '/things/7', '{"a":')).toMatchObject({ status: 400, code: 'input.invalid_json' });
    expect(await errorOf('POST', '/things/7', '{"__proto__":{"x":1}}')).toMatchObject({ status: 400, code: 'input.invalid_json' });
    expect(await errorOf('GET', `/things/${'a'.repeat(101)}`)).toMatchObject({ status: 414, code: 'input.url_too_long' });
    expect(await errorOf('GET', '/things/%E0%A4%A')).toMatchObject({ status: 400, code: 'input.malformed_request' });
  });

  it("a library's client error keeps its status; anything else is a plain 500 without internals", async () => {
    expect(await errorOf('GET', '/range')).toMatchObject({ status: 416, code: 'input.invalid', message: 'Range Not Satisfiable' });
    const boom = await errorOf('GET', '/boom');
    expect(boom).toMatchObject({ status: 500, code: 'internal.unexpected' });
    expect(boom.message).not.toContain('secret');
  });
});
