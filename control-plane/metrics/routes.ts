/**
 * `GET /metrics`: the Prometheus text exposition. Public like `/healthz` (app.ts lists both as
 * public routes): a scraper then needs no API key, and an admin key — the only kind that could
 * see installation-wide numbers — would give it every admin power. What it shows is aggregate
 * only (see metrics/service.ts): counts by state, tool, status, decision, pool; no sandbox id,
 * tenant, label or secret. It is served on the API's own listen address (`SBX_HOST`, loopback by
 * default); an installation exposing the API wider filters `/metrics` at its proxy.
 */
import type { FastifyPluginAsync } from 'fastify';
import { AppError } from '../../contract/errors.js';
import type { Metrics } from './service.js';

export const metricsRoutes: FastifyPluginAsync<{ metrics: Metrics }> = async (app, { metrics }) => {
  app.get(
    '/metrics',
    { schema: { tags: ['meta'], summary: 'Prometheus metrics (text format)', security: [] } },
    async (_request, reply) => {
      let rendered;
      try {
        rendered = await metrics.render();
      } catch (err) {
        // The scrape-time gauges read Redis: no answer there is no scrape, not an internal error.
        throw new AppError('queue.unavailable', `metrics could not be read: ${(err as Error).message}`, { cause: err });
      }
      return reply.header('content-type', rendered.contentType).send(rendered.text);
    },
  );
};
