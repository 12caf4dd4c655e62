/**
 * The preview fast path: plain HTTP requests to `/v1/sandboxes/:id/ports/:port/...` are served
 * from the HTTP server's request event, ahead of fastify's router, hooks, schema validation,
 * reply and per-request logger. A preview GET is a whole request of its own for every asset a
 * browser loads, and fastify's share of it was measured as the largest part of the control
 * plane's CPU per GET (bench `preview` figure, `npm run bench:profile` with
 * `SBX_PROFILE_WORKLOAD=preview`).
 *
 * It takes a request only when it is plainly one of these and every check passes: the API key
 * (the auth hook's own `Authenticate`), the lease (visible to the key, usable now: the lease
 * guard's rules) and the port (the policy's `ports.allowed`). Anything else — an upgrade, a
 * request on a preview host (host-based routing), a URL whose prefix is not in its plain form
 * (percent-escapes, an absolute form), a bad key, a lease not found or not usable, a port the
 * policy denies — goes on to fastify as it came, its body unread, and fastify answers it after
 * the same checks with the documented error. Once taken, a failure to reach the server is
 * answered in the documented error shape too (http/errors.ts `answerRawError`).
 *
 * Logs as fastify does for a route: `incoming request` and `request completed` at `info`, with
 * `reqId` (the `X-Request-Id` header, else `preview-<n>`) and `sandboxId`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import type { Authenticate, Principal } from '../http/auth.js';
import { answerRawError } from '../http/errors.js';
import type { LeaseGuardDeps } from '../http/lease-guard.js';
import { servePreview, type PreviewTarget } from './serve.js';
import type { PreviewService } from './service.js';

/** An HTTP server's request listener. */
export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** The route's prefix in its plain form (the same id rule as LeaseParams, a port as the route's Port schema). */
const PLAIN_PREFIX = /^\/v1\/sandboxes\/([A-Za-z0-9_-]{1,128})\/ports\/([1-9][0-9]{0,4})\//;
/**
 * Routes under the prefix that are not the preview itself (routes.ts), as `METHOD path-after-prefix`:
 * fastify's router prefers them to the wildcard, and so does the fast path (a test holds this list to the router).
 */
export const ROUTES_UNDER_PREFIX: ReadonlySet<string> = new Set(['POST url']);
/** Methods of the preview route (routes.ts). */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

export interface PreviewFastPathDeps {
  previews: PreviewService;
  authenticate: Authenticate;
  leases: LeaseGuardDeps;
  log: Logger;
}

/**
 * A request listener that serves what it can take (above) and hands every other request to
 * `routed` (fastify's own listener). Never throws.
 */
export function previewFastPath(deps: PreviewFastPathDeps, routed: RequestListener): RequestListener {
  let served = 0;
  return (req, res) => {
    const url = req.url ?? '';
    const m = (req as { upgrade?: boolean }).upgrade === true || !METHODS.has(req.method ?? '') ? null : PLAIN_PREFIX.exec(url);
    const port = m === null ? 0 : Number(m[2]);
    if (m === null || port > 65535 || deps.previews.hostTarget(req.headers.host) !== null || ownRoute(req.method!, url, m[0].length)) {
      routed(req, res);
      return;
    }
    const id = m[1]!;
    checked(deps, req, id, port)
      .then((target) => {
        if (target === null) return routed(req, res);
        const header = req.headers['x-request-id'];
        served += 1;
        const reqId = typeof header === 'string' && header !== '' ? header : `preview-${served}`;
        return serve(deps, req, res, { ...target, rawUrl: url }, reqId);
      })
      .catch((err: unknown) => {
        deps.log.error({ err, sandboxId: id }, 'preview fast path failed');
        res.destroy();
      });
  };
}

/** Whether `url` (its prefix `prefixLength` long) is one of ROUTES_UNDER_PREFIX for `method`. */
function ownRoute(method: string, url: string, prefixLength: number): boolean {
  const q = url.indexOf('?', prefixLength);
  return ROUTES_UNDER_PREFIX.has(`${method} ${url.slice(prefixLength, q < 0 ? undefined : q)}`);
}

/** The target when the key, the lease and the port all pass; null otherwise (fastify answers). */
async function checked(
  deps: PreviewFastPathDeps,
  req: IncomingMessage,
  id: string,
  port: number,
): Promise<Omit<PreviewTarget, 'rawUrl'> | null> {
  try {
    const principal: Principal = await deps.authenticate(req.headers.authorization);
    const lease = deps.leases.usable(await deps.leases.visible(id, principal));
    deps.previews.authorize(lease, port);
    return {
      lease,
      port,
      via: 'api',
      keyId: principal.keyId,
      tenant: principal.tenant,
      prefixSegments: 5,
      prefix: `/v1/sandboxes/${id}/ports/${port}`,
    };
  } catch {
    return null;
  }
}

async function serve(
  deps: PreviewFastPathDeps,
  req: IncomingMessage,
  res: ServerResponse,
  target: PreviewTarget,
  reqId: string,
): Promise<void> {
  const log = deps.log.isLevelEnabled('info') ? deps.log.child({ reqId, sandboxId: target.lease.id }) : null;
  const startedMs = performance.now();
  if (log) {
    log.info(
      { req: { method: req.method, url: req.url, host: req.headers.host, remoteAddress: req.socket.remoteAddress } },
      'incoming request',
    );
    res.once('finish', () =>
      log.info({ res: { statusCode: res.statusCode }, responseTime: performance.now() - startedMs }, 'request completed'),
    );
  }
  const protocol = (req.socket as TLSSocket).encrypted ? 'https' : 'http';
  try {
    await servePreview(deps.previews, { req, res, protocol, hijack: () => undefined }, target);
  } catch (err) {
    answerRawError(res, err, reqId, log ?? deps.log.child({ reqId, sandboxId: target.lease.id }));
  }
}
