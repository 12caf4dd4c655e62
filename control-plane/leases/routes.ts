/**
 * Lease routes: create, read, list, lease events, renew, release. Each passes the caller's principal to the lease
 * service, which scopes every lookup to the caller's tenant (user keys) in one place.
 */
import type { FastifyPluginAsync } from 'fastify';
import { parseInput } from '../http/errors.js';
import { CreateSandboxBody, IdempotencyKey, LeaseParams, ListSandboxesQuery, ReleaseQuery, RenewSandboxBody, matchesListQuery } from './schema.js';
import type { LeaseService } from './service.js';

export const leasesRoutes: FastifyPluginAsync<{ leases: LeaseService }> = async (app, { leases }) => {
  app.post('/v1/sandboxes', async (request, reply) => {
    const body = parseInput(CreateSandboxBody, request.body ?? {}, 'body');
    const rawKey = request.headers['idempotency-key'];
    const key = rawKey === undefined ? undefined : parseInput(IdempotencyKey, rawKey, 'headers.idempotency-key');
    const { lease, replayed } = await leases.create(body, request.principal, key);
    if (replayed) reply.header('idempotent-replayed', 'true');
    return reply.status(replayed ? 200 : 201).send(lease);
  });

  app.get('/v1/sandboxes', async (request) => {
    const query = parseInput(ListSandboxesQuery, request.query, 'query');
    return { sandboxes: (await leases.list(request.principal)).filter((lease) => matchesListQuery(lease, query)) };
  });

  app.get('/v1/sandboxes/:id', async (request) => {
    const { id } = parseInput(LeaseParams, request.params, 'params');
    return leases.get(id, request.principal);
  });

  app.get('/v1/sandboxes/:id/events', async (request) => {
    const { id } = parseInput(LeaseParams, request.params, 'params');
    return { events: await leases.events(id, request.principal) };
  });

  app.post('/v1/sandboxes/:id/renew', async (request) => {
    const { id } = parseInput(LeaseParams, request.params, 'params');
    const { ttlSeconds } = parseInput(RenewSandboxBody, request.body ?? {}, 'body');
    return leases.renew(id, request.principal, ttlSeconds);
  });

  app.delete('/v1/sandboxes/:id', async (request) => {
    const { id } = parseInput(LeaseParams, request.params, 'params');
    const { graceMs } = parseInput(ReleaseQuery, request.query, 'query');
    return leases.release(id, request.principal, graceMs);
  });
};
