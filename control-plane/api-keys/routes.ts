/** API-key routes (admin keys only): create (the secret is shown once), list, revoke. */
import type { FastifyPluginAsync } from 'fastify';
import { requireAdmin } from '../http/auth.js';
import { parseInput } from '../http/errors.js';
import { ApiKeyParams, CreateApiKeyBody } from './schema.js';
import type { ApiKeyService } from './service.js';

export const apiKeysRoutes: FastifyPluginAsync<{ apiKeys: ApiKeyService }> = async (app, { apiKeys }) => {
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preHandler', requireAdmin);

  app.post('/v1/api-keys', async (request, reply) => {
    const body = parseInput(CreateApiKeyBody, request.body ?? {}, 'body');
    return reply.status(201).send(await apiKeys.create(body, request.principal));
  });

  app.get('/v1/api-keys', async () => ({ keys: await apiKeys.list() }));

  app.delete('/v1/api-keys/:id', async (request) => {
    const { id } = parseInput(ApiKeyParams, request.params, 'params');
    return apiKeys.revoke(id, request.principal);
  });
};
