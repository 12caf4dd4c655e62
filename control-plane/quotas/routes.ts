/** Tenant quota routes (admin keys only): read and set a tenant's limits, with its usage. */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { requireAdmin } from '../http/auth.js';
import { QuotaLimits, TenantParams } from './schema.js';
import type { QuotaService } from './service.js';

export const quotasRoutes: FastifyPluginAsync<{ quotas: QuotaService }> = async (plugin, { quotas }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preValidation', requireAdmin);
  const tags = ['admin: quotas'];

  app.get(
    '/v1/tenants/:tenant/quota',
    { schema: { tags, summary: "A tenant's limits and usage", params: TenantParams } },
    async (request) => quotas.get(request.params.tenant),
  );

  const putSchema = {
    tags,
    summary: "Set a tenant's limits",
    description: 'A field left out takes the default; `null` is no limit; `{}` returns the tenant to the default.',
    params: TenantParams,
    body: QuotaLimits,
  };
  app.put('/v1/tenants/:tenant/quota', { schema: putSchema }, async (request) =>
    quotas.put(request.params.tenant, request.body, request.principal),
  );
};
