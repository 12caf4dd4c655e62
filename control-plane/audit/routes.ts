/** `GET /v1/audit`: the audit log, newest first, paginated. Admin keys only. */
import type { FastifyPluginAsync } from 'fastify';
import { requireAdmin } from '../http/auth.js';
import { parseInput } from '../http/errors.js';
import { AuditQuery } from './schema.js';
import type { AuditLog } from './service.js';

export const auditRoutes: FastifyPluginAsync<{ audit: AuditLog }> = async (app, { audit }) => {
  // Encapsulated: the hook guards every route of this plugin and no other.
  app.addHook('preHandler', requireAdmin);

  app.get('/v1/audit', async (request) => audit.list(parseInput(AuditQuery, request.query, 'query')));
};
