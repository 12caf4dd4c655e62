/**
 * Volume routes: create, list, read, delete. Every route is scoped to the caller's tenant (admin
 * keys included): a tenant's volume names never meet another's, and another tenant's volume is
 * `404 volume.not_found`.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CreateVolumeBody, VolumeParams } from './schema.js';
import type { VolumeService } from './service.js';

export const volumesRoutes: FastifyPluginAsync<{ volumes: VolumeService }> = async (plugin, { volumes }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['volumes'];

  const createSchema = {
    tags,
    summary: 'Create a persistent volume',
    description:
      '`201` the volume: an ext4 filesystem of `sizeBytes` that sandboxes mount with `volumes` of `POST /v1/sandboxes` and that outlives them.',
    body: CreateVolumeBody,
  };
  app.post('/v1/volumes', { schema: createSchema }, async (request, reply) =>
    reply.status(201).send(await volumes.create(request.body, request.principal)),
  );

  app.get(
    '/v1/volumes',
    { schema: { tags, summary: "The tenant's volumes, the bytes they take and the tenant's limit" } },
    async (request) => volumes.list(request.principal),
  );

  app.get(
    '/v1/volumes/:name',
    { schema: { tags, summary: 'A volume, with the live sandboxes that have it mounted', params: VolumeParams } },
    async (request) => volumes.get(request.params.name, request.principal),
  );

  app.delete(
    '/v1/volumes/:name',
    {
      schema: {
        tags,
        summary: 'Delete a volume and its content',
        description: '`409 volume.in_use` while a sandbox that has not ended has it mounted.',
        params: VolumeParams,
      },
    },
    async (request) => volumes.delete(request.params.name, request.principal),
  );
};
