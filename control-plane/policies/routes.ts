/**
 * Policy routes (admin keys only): list the current policies, read one (current, history, one
 * version), PUT a new version, DELETE (tombstone). Leases name policies in `POST /v1/sandboxes`
 * with any key; these routes manage them.
 */
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { requireAdmin } from '../http/auth.js';
import { parseInput } from '../http/errors.js';
import { PolicyShape } from './schema.js';
import type { PolicyService } from './service.js';

const NameParams = z.object({ name: PolicyShape.shape.name });
const VersionParams = NameParams.extend({ version: z.coerce.number().int().positive() });

export const policiesRoutes: FastifyPluginAsync<{ policies: PolicyService }> = async (app, { policies }) => {
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preHandler', requireAdmin);

  app.get('/v1/policies', async () => ({ policies: await policies.list() }));

  app.get('/v1/policies/:name', async (request) => policies.current(parseInput(NameParams, request.params, 'params').name));

  app.get('/v1/policies/:name/versions', async (request) => policies.history(parseInput(NameParams, request.params, 'params').name));

  app.get('/v1/policies/:name/versions/:version', async (request) => {
    const { name, version } = parseInput(VersionParams, request.params, 'params');
    return policies.version(name, version);
  });

  app.put('/v1/policies/:name', async (request, reply) => {
    const { name } = parseInput(NameParams, request.params, 'params');
    const { version, created } = await policies.put(name, request.body, request.principal);
    return reply.status(created ? 201 : 200).send(version);
  });

  app.delete('/v1/policies/:name', async (request) => policies.delete(parseInput(NameParams, request.params, 'params').name, request.principal));
};
