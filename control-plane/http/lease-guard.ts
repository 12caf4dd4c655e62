/**
 * The lease guard of sandbox routes: a route declares `config: { lease: 'visible' }` (the
 * caller may see the lease: reads of its calls, artifacts, egress log) or `'active'` (it may use
 * it now: submitting calls, files), and a `preHandler` finds the lease once and sets
 * `request.lease` before the handler runs. A lease the caller may not see is `lease.not_found`,
 * exactly like a missing one; one that may not be used now is `lease.expired`,
 * `lease.released` or `lease.not_ready` (LeaseService.active).
 */
import type { FastifyInstance } from 'fastify';
import type { Principal } from './auth.js';
import type { LeaseRecord } from '../leases/store.js';

/** How much of a lease a route needs. */
export type LeaseNeed = 'visible' | 'active';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The lease guard of a `/v1/sandboxes/:id/...` route (http/lease-guard.ts). */
    lease?: LeaseNeed;
  }
  interface FastifyRequest {
    /** The lease of `params.id`, set by the lease guard on routes that declare `config.lease`. */
    lease: LeaseRecord;
  }
}

export interface LeaseGuardDeps {
  /** The lease if `by` may see it; throws `lease.not_found`. */
  visible(id: string, by: Principal): Promise<LeaseRecord>;
  /** `lease` if it may be used now; throws `lease.expired`, `lease.released`, `lease.not_ready`. */
  usable(lease: LeaseRecord): LeaseRecord;
}

/** Installs the guard on `app` (route params are validated before it runs). */
export function installLeaseGuard(app: FastifyInstance, deps: LeaseGuardDeps): void {
  app.decorateRequest('lease', null as unknown as LeaseRecord);
  app.addHook('preHandler', async (request) => {
    const need = request.routeOptions.config.lease;
    if (need === undefined) return;
    const lease = await deps.visible((request.params as { id: string }).id, request.principal);
    request.lease = need === 'active' ? deps.usable(lease) : lease;
  });
}
