/**
 * Secret routes, all for admin keys (`auth.admin_required` otherwise): store a value, read
 * metadata, delete. No route returns a value; values reach only sandboxes that lease them.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { requireAdmin } from '../http/auth.js';
import { PutSecretBody, SecretParams } from './schema.js';
import type { SecretService } from './service.js';

export const secretsRoutes: FastifyPluginAsync<{ secrets: SecretService }> = async (plugin, { secrets }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  // Encapsulated: the hook guards this plugin's routes only.
  app.addHook('preValidation', requireAdmin);
  const tags = ['admin: secrets'];

  const putSchema = {
    tags,
    summary: 'Store a secret (encrypted at rest)',
    description: '`201` metadata, `200` with the next `version` when it existed. The value is never returned.',
    params: SecretParams,
    body: PutSecretBody,
  };
  app.put('/v1/secrets/:name', { schema: putSchema }, async (request, reply) => {
    const { metadata, created } = await secrets.put(request.params.name, request.body.value, request.principal);
    return reply.status(created ? 201 : 200).send(metadata);
  });

  app.get('/v1/secrets', { schema: { tags, summary: 'List secrets (metadata only)' } }, async () => ({ secrets: await secrets.list() }));

  app.get('/v1/secrets/:name', { schema: { tags, summary: "A secret's metadata", params: SecretParams } }, async (request) =>
    secrets.metadata(request.params.name),
  );

  app.delete(
    '/v1/secrets/:name',
    { schema: { tags, summary: 'Delete a secret (idempotent)', params: SecretParams } },
    async (request, reply) => {
      await secrets.delete(request.params.name, request.principal);
      return reply.status(204).send();
    },
  );
};
