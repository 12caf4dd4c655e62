/** Tenant quota routes (admin keys only): read and set a tenant's limits, with its usage. */
import type { FastifyPluginAsync } from 'fastify';
import { requireAdmin } from '../http/auth.js';
import { parseInput } from '../http/errors.js';
import { QuotaLimits, TenantParams } from './schema.js';
import type { QuotaService } from './service.js';

export const quotasRoutes: FastifyPluginAsync<{ quotas: QuotaService }> = async (app, { quotas }) => {
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preHandler', requireAdmin);

  app.get('/v1/tenants/:tenant/quota', async (request) => {
    const { tenant } = parseInput(TenantParams, request.params, 'params');
    return quotas.get(tenant);
  });

  app.put('/v1/tenants/:tenant/quota', async (request) => {
    const { tenant } = parseInput(TenantParams, request.params, 'params');
    const body = parseInput(QuotaLimits, request.body ?? {}, 'body');
    return quotas.put(tenant, body, request.principal);
  });
};
