/** API-key routes (admin keys only): create (the secret is shown once), list, revoke. */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { requireAdmin } from '../http/auth.js';
import { ApiKeyParams, CreateApiKeyBody } from './schema.js';
import type { ApiKeyService } from './service.js';

export const apiKeysRoutes: FastifyPluginAsync<{ apiKeys: ApiKeyService }> = async (plugin, { apiKeys }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preValidation', requireAdmin);
  const tags = ['admin: api keys'];

  const createSchema = {
    tags,
    summary: 'Create an API key',
    description: '`201` its metadata and its `secret`, shown this once.',
    body: CreateApiKeyBody,
  };
  app.post('/v1/api-keys', { schema: createSchema }, async (request, reply) =>
    reply.status(201).send(await apiKeys.create(request.body, request.principal)),
  );

  app.get('/v1/api-keys', { schema: { tags, summary: 'List API keys (metadata only)' } }, async () => ({ keys: await apiKeys.list() }));

  app.delete('/v1/api-keys/:id', { schema: { tags, summary: 'Revoke an API key', params: ApiKeyParams } }, async (request) =>
    apiKeys.revoke(request.params.id, request.principal),
  );
};
