import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { apiKeyAuthenticator, installApiKeyAuth, keyDigest, type Principal } from '../http/auth.js';
import { installErrorHandling } from '../http/errors.js';
import { installZodValidation } from '../http/openapi.js';
import { secretsRoutes } from './routes.js';
import type { SecretService } from './service.js';

const metadata = {
  name: 'TOKEN',
  version: 1,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
  updatedBy: 'key_admin',
  sizeBytes: 5,
};

/** The secrets routes behind real auth: `admin-key` is the bootstrap admin, `user-key` a user. */
async function app(calls: unknown[][]) {
  const server = Fastify();
  installErrorHandling(server);
  installZodValidation(server);
  const user: Principal = { keyId: 'key_user', role: 'user', tenant: 't' };
  installApiKeyAuth(server, {
    authenticate: apiKeyAuthenticator({
      bootstrapKey: 'admin-key-0123456789',
      lookup: async (digest) => (digest === keyDigest('user-key') ? user : undefined),
    }),
  });
  const service = {
    put: async (...args: unknown[]) => (calls.push(['put', ...args]), { metadata, created: true }),
    metadata: async () => metadata,
    list: async () => [metadata],
    delete: async (...args: unknown[]) => (calls.push(['delete', ...args]), true),
  } as unknown as SecretService;
  await server.register(secretsRoutes, { secrets: service });
  return server;
}

describe('secrets routes', () => {
  it('every route needs an admin key: a user key is 403 auth.admin_required and reaches no service method', async () => {
    const calls: unknown[][] = [];
    const server = await app(calls);
    for (const [method, url] of [
      ['PUT', '/v1/secrets/TOKEN'],
      ['GET', '/v1/secrets'],
      ['GET', '/v1/secrets/TOKEN'],
      ['DELETE', '/v1/secrets/TOKEN'],
    ] as const) {
      const response = await server.inject({
        method,
        url,
        headers: { authorization: 'Bearer user-key' },
        ...(method === 'PUT' ? { payload: { value: 'hello' } } : {}),
      });
      expect([url, response.statusCode, response.json().error.code]).toEqual([url, 403, 'auth.admin_required']);
    }
    expect(calls).toEqual([]);
  });

  it('an admin PUT stores the value with the caller as updatedBy and answers 201 with metadata only; DELETE answers 204', async () => {
    const calls: unknown[][] = [];
    const server = await app(calls);
    const put = await server.inject({
      method: 'PUT',
      url: '/v1/secrets/TOKEN',
      headers: { authorization: 'Bearer admin-key-0123456789' },
      payload: { value: 'hello' },
    });
    expect(put.statusCode).toBe(201);
    expect(put.json()).toEqual(metadata);
    expect(calls).toEqual([['put', 'TOKEN', 'hello', { keyId: 'bootstrap', role: 'admin', tenant: 'default' }]]);
    const del = await server.inject({
      method: 'DELETE',
      url: '/v1/secrets/TOKEN',
      headers: { authorization: 'Bearer admin-key-0123456789' },
    });
    expect(del.statusCode).toBe(204);
    expect(calls.at(-1)).toEqual(['delete', 'TOKEN', { keyId: 'bootstrap', role: 'admin', tenant: 'default' }]);
  });
});
