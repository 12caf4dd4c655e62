/**
 * Policy routes (admin keys only): list the current policies, read one (current, history, one
 * version), PUT a new version, DELETE (tombstone). Leases name policies in `POST /v1/sandboxes`
 * with any key; these routes manage them.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { requireAdmin } from '../http/auth.js';
import { validatedByHandler } from '../http/openapi.js';
import { PolicyShape } from './schema.js';
import type { ProposalService } from './proposal-service.js';
import type { PolicyService } from './service.js';

const NameParams = z.object({ name: PolicyShape.shape.name });
const VersionParams = NameParams.extend({ version: z.coerce.number().int().positive() });

/**
 * A PUT body: a policy whose `name` (must match the path) and `version` (compare-and-swap) may be
 * left out. Documented here, validated by the policy service, which answers `policy.invalid`
 * with every issue at once (the shape's and the cross-field rules').
 */
const PutPolicyBody = validatedByHandler(PolicyShape.partial({ name: true, version: true }));

export const policiesRoutes: FastifyPluginAsync<{ policies: PolicyService; proposals: ProposalService }> = async (
  plugin,
  { policies, proposals },
) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preValidation', requireAdmin);
  const tags = ['admin: policies'];

  app.get('/v1/policies', { schema: { tags, summary: 'The current version of every policy not deleted' } }, async () => ({
    policies: await policies.list(),
  }));

  app.get('/v1/policies/:name', { schema: { tags, summary: "A policy's current version", params: NameParams } }, async (request) =>
    policies.current(request.params.name),
  );

  app.get(
    '/v1/policies/:name/versions',
    { schema: { tags, summary: 'Every version of a policy, oldest first', params: NameParams } },
    async (request) => policies.history(request.params.name),
  );

  const versionSchema = { tags, summary: 'One version of a policy (also of a deleted one)', params: VersionParams };
  app.get('/v1/policies/:name/versions/:version', { schema: versionSchema }, async (request) =>
    policies.version(request.params.name, request.params.version),
  );

  const putSchema = {
    tags,
    summary: 'Store the next version of a policy',
    description:
      '`201` when the name was new or deleted, else `200`. A `version` given must be the next one (`409 policy.version_conflict`). An invalid policy is `400 policy.invalid` listing every issue with its path.',
    params: NameParams,
    body: PutPolicyBody,
  };
  app.put('/v1/policies/:name', { schema: putSchema }, async (request, reply) => {
    const { version, created } = await policies.put(request.params.name, request.body, request.principal);
    return reply.status(created ? 201 : 200).send(version);
  });

  app.delete(
    '/v1/policies/:name',
    { schema: { tags, summary: 'Delete a policy (tombstone; idempotent)', params: NameParams } },
    async (request) => policies.delete(request.params.name, request.principal),
  );

  app.get(
    '/v1/policies/:name/proposals',
    {
      schema: {
        tags,
        summary: "The smallest allowlist change that would have let the policy's leases' denied egress through, with the evidence",
        description:
          'Hosts no rule names (a host rule with the ports asked), ports a host rule lacks, and requests an `http` section had no allow entry for (method and exact path). Never proposed, listed in `notProposed`: addresses (a `cidr` rule is a deliberate choice) and explicit `deny` entries. `proposed` is the policy with every change made.',
        params: NameParams,
      },
    },
    async (request) => proposals.proposal(request.params.name),
  );

  app.post(
    '/v1/policies/:name/proposals/accept',
    {
      schema: {
        tags,
        summary: 'Write the proposal as the next version of the policy (compare-and-swap on the version reviewed)',
        description:
          '`409 policy.version_conflict` when the policy changed since `version`; `409 policy.nothing_proposed` when there is no change. Audited (`policy.proposal_accept`).',
        params: NameParams,
        body: z.object({ version: z.number().int().positive(), digest: z.string().max(100) }).strict(),
      },
    },
    async (request, reply) =>
      reply.status(201).send(await proposals.accept(request.params.name, request.body.version, request.body.digest, request.principal)),
  );
};
