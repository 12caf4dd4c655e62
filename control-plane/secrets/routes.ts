/**
 * Secret routes, all for admin keys (`auth.admin_required` otherwise): store a value, read
 * metadata, delete. No route returns a value; values reach only sandboxes that lease them.
 */
import type { FastifyPluginAsync } from 'fastify';
import { requireAdmin } from '../http/auth.js';
import { parseInput } from '../http/errors.js';
import { PutSecretBody, SecretParams } from './schema.js';
import type { SecretService } from './service.js';

export const secretsRoutes: FastifyPluginAsync<{ secrets: SecretService }> = async (app, { secrets }) => {
  // Encapsulated: the hook guards this plugin's routes only.
  app.addHook('preHandler', requireAdmin);

  app.put('/v1/secrets/:name', async (request, reply) => {
    const { name } = parseInput(SecretParams, request.params, 'params');
    const { value } = parseInput(PutSecretBody, request.body ?? {}, 'body');
    const { metadata, created } = await secrets.put(name, value, request.principal);
    return reply.status(created ? 201 : 200).send(metadata);
  });

  app.get('/v1/secrets', async () => ({ secrets: await secrets.list() }));

  app.get('/v1/secrets/:name', async (request) => {
    const { name } = parseInput(SecretParams, request.params, 'params');
    return secrets.metadata(name);
  });

  app.delete('/v1/secrets/:name', async (request, reply) => {
    const { name } = parseInput(SecretParams, request.params, 'params');
    await secrets.delete(name, request.principal);
    return reply.status(204).send();
  });
};
