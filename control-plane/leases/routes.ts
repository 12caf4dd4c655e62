/**
 * Lease routes: create, read, list, lease events, renew, pause, resume, checkpoint, release. Each passes the caller's
 * principal to the lease service, which scopes every lookup to the caller's tenant (user keys)
 * in one place. Inputs are validated from the `schema:` of each route (see http/openapi.ts).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import {
  CheckpointBody,
  CreateSandboxBody,
  CreateSandboxHeaders,
  LeaseParams,
  ListSandboxesQuery,
  ReleaseQuery,
  RenewSandboxBody,
  matchesListQuery,
} from './schema.js';
import type { LeaseService } from './service.js';

export const leasesRoutes: FastifyPluginAsync<{ leases: LeaseService }> = async (plugin, { leases }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['sandboxes'];

  app.post(
    '/v1/sandboxes',
    {
      schema: {
        tags,
        summary: 'Lease a sandbox',
        description: '`201` the lease with its manifest; `200` with `idempotent-replayed: true` for a replayed Idempotency-Key.',
        body: CreateSandboxBody,
        headers: CreateSandboxHeaders,
      },
    },
    async (request, reply) => {
      const { lease, replayed } = await leases.create(request.body, request.principal, request.headers['idempotency-key']);
      if (replayed) reply.header('idempotent-replayed', 'true');
      return reply.status(replayed ? 200 : 201).send(lease);
    },
  );

  app.get(
    '/v1/sandboxes',
    {
      schema: {
        tags,
        summary: 'List sandboxes',
        description: 'Filtered by labels (all must match) and statuses (any may match).',
        querystring: ListSandboxesQuery,
      },
    },
    async (request) => ({
      sandboxes: (await leases.list(request.principal)).filter((lease) => matchesListQuery(lease, request.query)),
    }),
  );

  app.get('/v1/sandboxes/:id', { schema: { tags, summary: 'Read a sandbox', params: LeaseParams } }, async (request) =>
    leases.get(request.params.id, request.principal),
  );

  app.get(
    '/v1/sandboxes/:id/events',
    { schema: { tags, summary: "The sandbox's status transitions, oldest first", params: LeaseParams } },
    async (request) => ({
      events: await leases.events(request.params.id, request.principal),
    }),
  );

  app.post(
    '/v1/sandboxes/:id/renew',
    {
      schema: {
        tags,
        summary: 'Move the expiry to now + ttlSeconds (the whole life bounded by the policy)',
        params: LeaseParams,
        body: RenewSandboxBody,
      },
    },
    async (request) => leases.renew(request.params.id, request.principal, request.body.ttlSeconds),
  );

  app.post(
    '/v1/sandboxes/:id/pause',
    {
      schema: {
        tags,
        summary: 'Pause a sandbox: every process frozen, its TTL stopped (idempotent)',
        description:
          'Calls and file transfers answer `409 lease.paused` until resumed; `expiresAt` becomes the end of the pause budget (policy `resources.pausedTtlSeconds`), at which a still-paused sandbox expires.',
        params: LeaseParams,
      },
    },
    async (request) => leases.pause(request.params.id, request.principal),
  );

  app.post(
    '/v1/sandboxes/:id/resume',
    {
      schema: {
        tags,
        summary: 'Resume a paused sandbox where it was (idempotent)',
        description: 'Processes, open files and background tasks go on; the running TTL left at the pause comes back from now.',
        params: LeaseParams,
      },
    },
    async (request) => leases.resume(request.params.id, request.principal),
  );

  app.post(
    '/v1/sandboxes/:id/checkpoints',
    {
      schema: {
        tags,
        summary: "Checkpoint a running sandbox's memory and processes (CRIU), where the engine can",
        description:
          '`422 policy.unenforceable` where the engine cannot (`details.missing`); never a filesystem-only snapshot in its place.',
        params: LeaseParams,
        body: CheckpointBody,
      },
    },
    async (request, reply) => reply.status(201).send(await leases.checkpoint(request.params.id, request.principal)),
  );

  app.delete(
    '/v1/sandboxes/:id',
    {
      schema: {
        tags,
        summary: 'Release a sandbox (idempotent); running calls get graceMs, then are cancelled',
        params: LeaseParams,
        querystring: ReleaseQuery,
      },
    },
    async (request) => leases.release(request.params.id, request.principal, request.query.graceMs),
  );
};
