/**
 * Snapshot routes: capture a sandbox (`POST /v1/sandboxes/:id/snapshots`), list, read, delete,
 * and fork N sandboxes from one. Every lookup is scoped to the caller's tenant by the service.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { LeaseParams } from '../leases/schema.js';
import { CreateSnapshotBody, ForkBody, SnapshotParams } from './schema.js';
import type { SnapshotService } from './service.js';

export const snapshotsRoutes: FastifyPluginAsync<{ snapshots: SnapshotService }> = async (plugin, { snapshots }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['snapshots'];

  app.post(
    '/v1/sandboxes/:id/snapshots',
    {
      schema: {
        tags,
        summary: "Snapshot a running sandbox's filesystem",
        description:
          "`201` the snapshot: the container's changed files and every writable root, as an image of the tenant's. The sandbox keeps running; calls in flight are not waited for (`inFlightCalls`). An ended or another tenant's sandbox is `404 lease.not_found`; over the tenant's snapshot bytes, `429 quota.exceeded`.",
        params: LeaseParams,
        body: CreateSnapshotBody.optional(),
      },
    },
    async (request, reply) => {
      const snapshot = await snapshots.capture(request.params.id, request.principal, request.body?.ttlSeconds);
      return reply.status(201).send(snapshot);
    },
  );

  app.get('/v1/snapshots', { schema: { tags, summary: "The tenant's snapshots, oldest first" } }, async (request) => ({
    snapshots: await snapshots.list(request.principal),
  }));

  app.get('/v1/snapshots/:id', { schema: { tags, summary: 'Read a snapshot', params: SnapshotParams } }, async (request) =>
    snapshots.get(request.params.id, request.principal),
  );

  app.delete(
    '/v1/snapshots/:id',
    {
      schema: {
        tags,
        summary: 'Delete a snapshot and its image',
        description: '`204`; `409 snapshot.in_use` while a sandbox started from it runs.',
        params: SnapshotParams,
      },
    },
    async (request, reply) => {
      await snapshots.delete(request.params.id, request.principal);
      return reply.status(204).send();
    },
  );

  app.post(
    '/v1/snapshots/:id/fork',
    {
      schema: {
        tags,
        summary: 'Start count sandboxes from a snapshot',
        description:
          '`201` `{sandboxes}`: count independent sandboxes, each with writable roots of its own filled from the snapshot, all or none. `count` 1 to `SBX_FORK_MAX`; more than the tenant sandbox quota leaves is `429 quota.exceeded` before anything starts.',
        params: SnapshotParams,
        body: ForkBody,
      },
    },
    async (request, reply) => {
      const sandboxes = await snapshots.fork(request.params.id, request.principal, request.body);
      return reply.status(201).send({ sandboxes });
    },
  );
};
