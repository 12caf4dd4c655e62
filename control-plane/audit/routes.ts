/** `GET /v1/audit`: the audit log, newest first, paginated. Admin keys only. */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { requireAdmin } from '../http/auth.js';
import { AuditQuery } from './schema.js';
import type { AuditLog } from './service.js';

export const auditRoutes: FastifyPluginAsync<{ audit: AuditLog }> = async (plugin, { audit }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preValidation', requireAdmin);

  const schema = {
    tags: ['admin: audit'],
    summary: 'The audit log, newest first',
    description: 'Pass `nextCursor` as `cursor` for older entries.',
    querystring: AuditQuery,
  };
  app.get('/v1/audit', { schema }, async (request) => audit.list(request.query));
};
