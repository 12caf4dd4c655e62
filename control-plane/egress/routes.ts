/**
 * `GET /v1/sandboxes/:id/egress`: the lease's egress log (network mode `allowlist`), oldest
 * first: every connection its sandbox asked the egress proxy for, allowed or denied, with the
 * rule that decided and the bytes moved. Readable after release, for the ledger's retention.
 * The newest 10 000 allowed and 10 000 denied events are kept; `dropped` counts the older ones.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { EgressEvent } from '../../contract/objects.js';
import { LeaseParams } from '../leases/schema.js';
import type { EgressLog } from './store.js';

/** The filters of an egress log read (`GET /v1/sandboxes/:id/egress`, `GET /v1/images/:id/egress`). */
export const EgressQuery = z
  .object({
    decision: z.enum(['allowed', 'denied']).optional(),
    /** Only events whose host contains this text (case-insensitive). */
    host: z.string().min(1).max(253).optional(),
    /** Newest `limit` events (after the decision filter). Default 1000. */
    limit: z.coerce.number().int().min(1).max(10_000).default(1000),
  })
  .strict();

export const egressRoutes: FastifyPluginAsync<{ egressLog: Pick<EgressLog, 'read'> }> = async (plugin, { egressLog }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const schema = {
    tags: ['sandboxes'],
    summary: "The sandbox's egress log (network mode allowlist), oldest first",
    params: LeaseParams,
    querystring: EgressQuery,
  };
  app.get('/v1/sandboxes/:id/egress', { schema, config: { lease: 'visible' } }, async (request): Promise<EgressAnswer> =>
    readEgress(egressLog, request.params.id, request.query),
  );
};

/** An egress log as the routes answer it. */
export interface EgressAnswer {
  events: EgressEvent[];
  dropped: { allowed: number; denied: number };
}

/** The egress log of `id` (a lease's or an image build's), filtered by `query`, oldest first. */
export async function readEgress(
  egressLog: Pick<EgressLog, 'read'>,
  id: string,
  query: z.infer<typeof EgressQuery>,
): Promise<EgressAnswer> {
  const log = await egressLog.read(id);
  const host = query.host?.toLowerCase();
  const events = log.events.filter(
    (e) => (query.decision === undefined || e.decision === query.decision) && (host === undefined || e.host.toLowerCase().includes(host)),
  );
  return { events: events.slice(-query.limit), dropped: log.dropped };
}
