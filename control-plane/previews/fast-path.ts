/**
 * The preview fast path: plain HTTP requests to `/v1/sandboxes/:id/ports/:port/...` (API key)
 * and `/v1/previews/:id/:token/...` (signed URL) are served from the HTTP server's request
 * event, ahead of fastify's router, hooks, schema validation, reply and per-request logger. A
 * preview GET is a whole request of its own for every asset a browser loads, and fastify's share
 * of it was measured as the largest part of the control plane's CPU per GET (bench `preview`
 * figure, `npm run bench:profile` with `SBX_PROFILE_WORKLOAD=preview`).
 *
 * It takes a request only when it is plainly one of these and every check passes: the API key
 * (the auth hook's own `Authenticate`) or the signed token (PreviewService.grantOf), the lease
 * (visible, usable now: the lease guard's rules) and the port (the policy's `ports.allowed`).
 * Anything else — an upgrade, a request on a preview host (host-based routing), a URL not in
 * its plain form (a percent-escape or `#` in its path, an absolute form), a bad key, a lease not
 * found or not usable, a port the policy denies, any request once the app is closing — goes on
 * to fastify as it came, its body unread, and fastify answers it (its own checks, its documented
 * errors). Once taken, a failure to reach the server is answered in the documented error shape
 * too (http/errors.ts `answerRawError`).
 *
 * Logs as fastify does for a route: `incoming request` and `request completed` at `info`, with
 * `reqId` (the `X-Request-Id` header, else `preview-<n>`) and `sandboxId`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import type { Authenticate } from '../http/auth.js';
import { answerRawError } from '../http/errors.js';
import type { LeaseGuardDeps } from '../http/lease-guard.js';
import { servePreview, type PreviewTarget } from './serve.js';
import type { PreviewService } from './service.js';

/** An HTTP server's request listener. */
export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** The API route's prefix in its plain form (the same id rule as LeaseParams, a port as the route's Port schema). */
const PLAIN_PREFIX = /^\/v1\/sandboxes\/([A-Za-z0-9_-]{1,128})\/ports\/([1-9][0-9]{0,4})\//;
/** A signed URL's prefix in its plain form (a token as tokens.ts signs them: base64url and `.`). */
const SIGNED_PREFIX = /^\/v1\/previews\/([A-Za-z0-9_-]{1,128})\/([A-Za-z0-9_.-]{1,100})\//;
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
  /** True once the app is closing: fastify then answers every request (503, the connection closed). */
  closing: () => boolean;
}

/**
 * A request listener that serves what it can take (above) and hands every other request to
 * `routed` (fastify's own listener). Never throws.
 */
export function previewFastPath(deps: PreviewFastPathDeps, routed: RequestListener): RequestListener {
  let served = 0;
  return (req, res) => {
    const check = takeable(deps, req);
    if (check === null) {
      routed(req, res);
      return;
    }
    check
      .then((target) => {
        if (target === null) return routed(req, res);
        const header = req.headers['x-request-id'];
        served += 1;
        const reqId = typeof header === 'string' && header !== '' ? header : `preview-${served}`;
        return serve(deps, req, res, target, reqId);
      })
      .catch((err: unknown) => {
        deps.log.error({ err }, 'preview fast path failed');
        res.destroy();
      });
  };
}

/**
 * Null when `req` is not plainly a preview request; else its checks, resolving to the target
 * when they all pass and to null when one fails (fastify answers then).
 */
function takeable(deps: PreviewFastPathDeps, req: IncomingMessage): Promise<PreviewTarget | null> | null {
  const url = req.url ?? '';
  const method = req.method ?? '';
  if ((req as { upgrade?: boolean }).upgrade === true || !METHODS.has(method) || deps.closing()) return null;
  // A path with escapes or a fragment is for the router (it decodes them: `%75rl` is the mint
  // route `url`, a bad escape its 400), and so is a request on a preview host.
  const query = url.indexOf('?');
  const path = query < 0 ? url : url.slice(0, query);
  if (path.includes('%') || path.includes('#') || deps.previews.hostTarget(req.headers.host) !== null) return null;
  const api = PLAIN_PREFIX.exec(url);
  if (api !== null) {
    const [prefix, id, port] = [api[0].slice(0, -1), api[1]!, Number(api[2])];
    if (port > 65535 || ownRoute(method, url, api[0].length)) return null;
    return passes(async () => {
      const principal = await deps.authenticate(req.headers.authorization);
      const lease = deps.leases.usable(await deps.leases.visible(id, principal));
      deps.previews.authorize(lease, port);
      return { lease, port, via: 'api', keyId: principal.keyId, tenant: principal.tenant, prefixSegments: 5, prefix, rawUrl: url };
    });
  }
  const signed = SIGNED_PREFIX.exec(url);
  if (signed !== null) {
    const [prefix, id, token] = [signed[0].slice(0, -1), signed[1]!, signed[2]!];
    return passes(async () => {
      const { lease, grant } = await deps.previews.grantOf(id, token);
      return { lease, port: grant.port, via: 'url', keyId: grant.keyId, tenant: lease.tenant, prefixSegments: 4, prefix, rawUrl: url };
    });
  }
  return null;
}

/** Whether `url` (its prefix `prefixLength` long) is one of ROUTES_UNDER_PREFIX for `method`. */
function ownRoute(method: string, url: string, prefixLength: number): boolean {
  const q = url.indexOf('?', prefixLength);
  return ROUTES_UNDER_PREFIX.has(`${method} ${url.slice(prefixLength, q < 0 ? undefined : q)}`);
}

/** What `checks` resolves to, or null when any of them throws. */
async function passes(checks: () => Promise<PreviewTarget>): Promise<PreviewTarget | null> {
  try {
    return await checks();
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
