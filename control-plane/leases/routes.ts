/**
 * Lease routes: create, read, list, lease events, renew, pause, resume, phase and policy moves, checkpoint, release. Each passes the caller's
 * principal to the lease service, which scopes every lookup to the caller's tenant (user keys)
 * in one place. Inputs are validated from the `schema:` of each route (see http/openapi.ts).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import {
  ChangePolicyBody,
  CheckpointBody,
  CreateSandboxBody,
  CreateSandboxHeaders,
  LeaseParams,
  ListSandboxesQuery,
  MovePhaseBody,
  ReleaseQuery,
  RenewSandboxBody,
  matchesListQuery,
} from './schema.js';
import type { Principal } from '../http/auth.js';
import type { Lease } from '../../contract/objects.js';
import type { LeaseService } from './service.js';
import { traced, type Tracing } from '../telemetry/tracing.js';

/**
 * Starts `count` sandboxes from snapshot `snapshot` (snapshots/ `startMany`), all or none; with
 * an Idempotency-Key, the same request again replays them.
 */
export type StartMany = (
  snapshot: string,
  by: Principal,
  body: { count: number; ttlSeconds?: number; labels?: Record<string, string> },
  idempotencyKey?: string,
) => Promise<{ sandboxes: Lease[]; replayed: boolean }>;

/** `tracing`: a lease's create and release are spans (`sbx.lease.create`, `sbx.lease.release`) under the request's `traceparent`. */
export const leasesRoutes: FastifyPluginAsync<{ leases: LeaseService; startMany: StartMany; tracing: Tracing }> = async (
  plugin,
  { leases, startMany, tracing },
) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['sandboxes'];

  app.post(
    '/v1/sandboxes',
    {
      schema: {
        tags,
        summary: 'Lease a sandbox',
        description:
          '`201` the lease with its manifest; `200` with `idempotent-replayed: true` for a replayed Idempotency-Key. With `{snapshot, count}`: `201 {sandboxes}`, count independent sandboxes from the snapshot, all or none (as `POST /v1/snapshots/:id/fork`); count over `SBX_FORK_MAX` is `400 input.invalid`, over the tenant sandbox quota `429 quota.exceeded` before anything starts; with an Idempotency-Key copy i is keyed `<key>#<i>/<count>` and the same request replays all of them (`200`).',
        body: CreateSandboxBody,
        headers: CreateSandboxHeaders,
      },
    },
    async (request, reply) => {
      const { snapshot, count, ttlSeconds, labels } = request.body;
      if (count !== undefined && snapshot !== undefined) {
        const body = { count, ...(ttlSeconds !== undefined ? { ttlSeconds } : {}), ...(labels ? { labels } : {}) };
        const many = await startMany(snapshot, request.principal, body, request.headers['idempotency-key']);
        if (many.replayed) reply.header('idempotent-replayed', 'true');
        return reply.status(many.replayed ? 200 : 201).send({ sandboxes: many.sandboxes });
      }
      const { lease, replayed } = await traced(
        tracing,
        tracing.parentOf(request.headers),
        'sbx.lease.create',
        { 'sbx.tenant': request.principal.tenant },
        () => leases.create(request.body, request.principal, request.headers['idempotency-key']),
        (created) => ({
          'sbx.sandbox.id': created.lease.id,
          'sbx.policy.name': created.lease.policy.name,
          'sbx.lease.replayed': created.replayed,
        }),
      );
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
    '/v1/sandboxes/:id/phase',
    {
      schema: {
        tags,
        summary: 'Move a sandbox to the next phase of its policy (forward only): its network and secrets change now',
        description:
          'Open connections through the egress proxy are cut; later calls are decided by the new phase (a withdrawn secret is `403 policy.secret_denied`); the manifest gets a new digest, the old one kept in `manifestHistory`. `400 lease.phase_unknown`, `409 lease.phase_behind`.',
        params: LeaseParams,
        body: MovePhaseBody,
      },
    },
    async (request) => leases.movePhase(request.params.id, request.principal, request.body.name),
  );

  app.post(
    '/v1/sandboxes/:id/policy',
    {
      schema: {
        tags,
        summary: 'Move a running sandbox to another version of its policy (admin): network and secrets change now',
        description:
          'Only the `network` and `secrets` sections may differ from the version it runs; any other is `409 policy.not_live_changeable` naming it, and nothing changes. Audited; the manifest history is kept.',
        params: LeaseParams,
        body: ChangePolicyBody,
      },
    },
    async (request) => leases.changePolicy(request.params.id, request.principal, request.body.version),
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
    async (request) =>
      traced(tracing, tracing.parentOf(request.headers), 'sbx.lease.release', { 'sbx.sandbox.id': request.params.id }, () =>
        leases.release(request.params.id, request.principal, request.query.graceMs),
      ),
  );
};
