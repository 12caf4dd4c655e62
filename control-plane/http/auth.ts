/**
 * Bearer API-key authentication for `/v1/*` and the caller's identity (`request.principal`).
 *
 * Keys are looked up by their sha256 digest, never stored or compared in clear; the bootstrap
 * key (`SBX_API_KEY` or `<data dir>/api-key`) is compared with `timingSafeEqual`, so the
 * comparison takes the same time whatever the key.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError } from '../../contract/errors.js';

/** `admin` manages policies, secrets, keys and sees every tenant; `user` works inside its tenant. */
/** `approver`: a user key that may also approve or deny calls waiting for approval (policy tool rules). */
export type Role = 'admin' | 'approver' | 'user';

/** Who is calling: the API key's id, its role and the tenant it acts for. */
export interface Principal {
  keyId: string;
  role: Role;
  tenant: string;
}

/** The tenant of the bootstrap admin key, and of sandboxes created before tenants existed. */
export const DEFAULT_TENANT = 'default';

/** The principal of the bootstrap key (`SBX_API_KEY`): admin of tenant `default`. */
export const BOOTSTRAP_PRINCIPAL: Principal = Object.freeze({ keyId: 'bootstrap', role: 'admin', tenant: DEFAULT_TENANT });

/**
 * Whether `principal` may see and touch what belongs to `tenant`: admin keys see every tenant,
 * user keys only their own. Callers answer "not found" otherwise, never "forbidden", so a user
 * key cannot learn that another tenant's sandbox exists.
 */
export function seesTenant(principal: Principal, tenant: string): boolean {
  return principal.role === 'admin' || principal.tenant === tenant;
}

/** Looks up a key by the hex sha256 of its secret; undefined when no such (live) key exists. */
export type PrincipalLookup = (keySha256Hex: string) => Promise<Principal | undefined>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on every `/v1/*` request that reaches a handler. */
    principal: Principal;
  }
}

/** The hex sha256 under which an API key's secret is stored and looked up. */
export function keyDigest(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** The bootstrap key and how other keys are found: what authenticating a request needs. */
export interface ApiKeyAuthOptions {
  bootstrapKey: string;
  lookup: PrincipalLookup;
}

/**
 * The principal an `Authorization` header names. Throws AppError `auth.missing_api_key` (401)
 * without a header (or `Bearer` with no key after it) and `auth.invalid_api_key` (401) for anything but `Bearer <a live key>`.
 */
export type Authenticate = (authorization: string | undefined) => Promise<Principal>;

/** The one authentication of API keys: the auth hook's, and the preview fast path's (previews/fast-path.ts). */
export function apiKeyAuthenticator(options: ApiKeyAuthOptions): Authenticate {
  const bootstrap = createHash('sha256').update(options.bootstrapKey).digest();
  return async (header) => {
    // `Bearer ` with nothing after it is a key variable left unset: missing, not a wrong key.
    if (!header || /^\s*Bearer\s*$/i.test(header)) throw new AppError('auth.missing_api_key', 'send Authorization: Bearer <api key>');
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match) throw new AppError('auth.invalid_api_key', 'the API key is not valid');
    const given = createHash('sha256').update(match[1]!).digest();
    if (timingSafeEqual(given, bootstrap)) return BOOTSTRAP_PRINCIPAL;
    const principal = await options.lookup(given.toString('hex'));
    if (!principal) throw new AppError('auth.invalid_api_key', 'the API key is not valid');
    return principal;
  };
}

/**
 * Installs the auth hook (`authenticate`, apiKeyAuthenticator) on every route but `publicRoutes`
 * (route patterns, default `/healthz`; an entry `/prefix/*` covers every route pattern under
 * `/prefix/`). Its errors are the responses.
 *
 * The check goes by the route the router matched, not the raw URL: the router decodes
 * percent-escapes (`/%761/tools` is `/v1/tools`), so a prefix test of the URL could be walked
 * around. A request no route matches runs no handler (404) and needs no key.
 */
export function installApiKeyAuth(app: FastifyInstance, options: { authenticate: Authenticate; publicRoutes?: readonly string[] }): void {
  const entries = options.publicRoutes ?? ['/healthz'];
  const publicRoutes = new Set(entries.filter((r) => !r.endsWith('/*')));
  const publicPrefixes = entries.filter((r) => r.endsWith('/*')).map((r) => r.slice(0, -1));
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url;
    if (route === undefined || publicRoutes.has(route) || publicPrefixes.some((p) => route.startsWith(p))) return;
    request.principal = await options.authenticate(request.headers.authorization);
  });
}

/**
 * preValidation hook of admin-only routes: runs before the request's input is validated, so a
 * user key learns nothing about an admin route's input. Throws AppError `auth.admin_required` (403) for user keys.
 */
export async function requireAdmin(request: FastifyRequest): Promise<void> {
  if (request.principal.role !== 'admin') {
    throw new AppError('auth.admin_required', 'this route needs an admin API key', { details: { role: request.principal.role } });
  }
}
