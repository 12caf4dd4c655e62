/**
 * Port preview routes (issue 13 part 8):
 * - `/v1/sandboxes/:id/ports/:port/*` (every method, WebSocket too), with an API key;
 * - `POST /v1/sandboxes/:id/ports/:port/url`: a signed URL for browsers;
 * - `/v1/previews/:token/*`: what a signed URL opens, without an API key;
 * - host-based routing, when `SBX_PREVIEW_DOMAIN` is set: every request whose Host is
 *   `<port>-<id>.<domain>` is rewritten (app.ts `rewriteUrl`) to `/v1/host-previews/<id>/<port>/...`
 *   and authenticated by the signed token (`?sbx_preview_token=`, moved into a host-only cookie
 *   on the first visit);
 * - `GET /v1/sandboxes/:id/previews`: the preview log.
 * Request bodies of the proxied routes are not parsed: they stream to the server in the sandbox.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import type { PreviewUrl } from '../../contract/previews.js';
import { LeaseParams } from '../leases/schema.js';
import { originForm } from './paths.js';
import { PREVIEW_COOKIE } from './proxy.js';
import { servePreview, type PreviewTarget } from './serve.js';
import { PREVIEW_TOKEN_PARAM, PREVIEW_URL_DEFAULT_SECONDS, PREVIEW_URL_MAX_SECONDS, type PreviewService } from './service.js';
import { installUpgradeDispatch } from '../http/upgrade.js';

const tags = ['previews'];
/** Methods the proxied routes take (HEAD forwarded as HEAD, not answered by fastify's GET). */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

/** A port as plain decimal digits, 1..65535: `0x1F40`, `8e3`, `+8000`, `08000` or `8000.0` name no port (400), not port 8000. */
const Port = z
  .string()
  .regex(/^[1-9][0-9]{0,4}$/, 'a port from 1 to 65535, in decimal digits')
  .transform(Number)
  .pipe(z.number().max(65535, 'a port from 1 to 65535'));
export const PortParams = LeaseParams.extend({ port: Port });
const WildParams = PortParams.extend({ '*': z.string() });
const TokenParams = LeaseParams.extend({ token: z.string().min(1).max(100) });
const HostParams = WildParams;

export const PreviewUrlBody = z
  .object({
    /** Lifetime of the URL, seconds (at most 7 days, and never past the sandbox's `expiresAt`). Default 3600. */
    expiresInSeconds: z.number().int().min(1).max(PREVIEW_URL_MAX_SECONDS).default(PREVIEW_URL_DEFAULT_SECONDS),
  })
  .strict()
  .meta({ examples: [{ expiresInSeconds: 600 }] });

const LogQuery = z
  .object({
    /** Newest `limit` events. Default 1000. */
    limit: z.coerce.number().int().min(1).max(10_000).default(1000),
  })
  .strict();

export const previewRoutes: FastifyPluginAsync<{ previews: PreviewService }> = async (plugin, { previews }) => {
  await plugin.register(apiRoutes, { previews });
  await plugin.register(proxiedRoutes, { previews });
  await plugin.register(hostRootRoute, { previews });
  installUpgradeDispatch(plugin);
};

const apiRoutes: FastifyPluginAsync<{ previews: PreviewService }> = async (plugin, { previews }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  app.post(
    '/v1/sandboxes/:id/ports/:port/url',
    {
      schema: {
        tags,
        summary: 'A signed preview URL of a port, for browsers (no API key needed to open it)',
        description:
          'HMAC-signed over sandbox, port and expiry; expired or tampered URLs answer `401`. With `SBX_PREVIEW_DOMAIN` set, `url` is the host-based form (`<port>-<id>.<domain>`).',
        params: PortParams,
        body: PreviewUrlBody,
      },
      config: { lease: 'active' },
    },
    async (request): Promise<PreviewUrl> =>
      previews.mint(request.lease, request.params.port, request.principal, request.body.expiresInSeconds, {
        protocol: request.protocol,
        host: request.host,
      }),
  );
  app.get(
    '/v1/sandboxes/:id/previews',
    {
      schema: {
        tags,
        summary: "The sandbox's preview log: every preview connection, oldest first",
        params: LeaseParams,
        querystring: LogQuery,
      },
      config: { lease: 'visible' },
    },
    async (request) => previews.read(request.params.id, request.query.limit),
  );
};

const proxiedRoutes: FastifyPluginAsync<{ previews: PreviewService }> = async (plugin, { previews }) => {
  // Bodies stream through untouched: no parser reads them (this plugin only).
  plugin.removeAllContentTypeParsers();
  plugin.addContentTypeParser('*', (_request, _payload, done) => done(null));
  const app = plugin.withTypeProvider<ZodTypeProvider>();

  app.route({
    method: [...METHODS],
    url: '/v1/sandboxes/:id/ports/:port/*',
    exposeHeadRoute: false,
    schema: {
      tags,
      summary: 'A server listening on this port inside the sandbox, over HTTP or WebSocket (any path under the prefix)',
      params: WildParams,
    },
    config: { lease: 'active' },
    handler: (request, reply) =>
      serveFastify(previews, request, reply, {
        lease: request.lease,
        port: request.params.port,
        via: 'api',
        keyId: request.principal.keyId,
        tenant: request.principal.tenant,
        prefixSegments: 5,
        prefix: `/v1/sandboxes/${request.params.id}/ports/${request.params.port}`,
        rawUrl: request.raw.url ?? '/',
      }),
  });
  app.get(
    '/v1/sandboxes/:id/ports/:port',
    {
      schema: {
        tags,
        summary: 'Redirects to the preview root (`.../ports/:port/`), so relative links resolve under it',
        params: PortParams,
      },
      config: { lease: 'visible' },
    },
    async (request, reply) => reply.redirect(slashed(request.raw.url ?? '/'), 308),
  );

  app.route({
    method: [...METHODS],
    url: '/v1/previews/:id/:token/*',
    exposeHeadRoute: false,
    schema: {
      tags,
      summary: 'What a signed preview URL opens (no API key: the token is the credential)',
      params: TokenParams.extend({ '*': z.string() }),
      security: [],
    },
    handler: async (request, reply) => {
      const { lease, grant } = await previews.grantOf(request.params.id, request.params.token);
      return serveFastify(previews, request, reply, {
        lease,
        port: grant.port,
        via: 'url',
        keyId: grant.keyId,
        tenant: lease.tenant,
        prefixSegments: 4,
        prefix: `/v1/previews/${request.params.id}/${request.params.token}`,
        rawUrl: request.raw.url ?? '/',
      });
    },
  });
  app.get(
    '/v1/previews/:id/:token',
    { schema: { tags, summary: 'Redirects to the signed preview root (`/v1/previews/:id/:token/`)', params: TokenParams, security: [] } },
    async (request, reply) => {
      await previews.grantOf(request.params.id, request.params.token);
      return reply.redirect(slashed(request.raw.url ?? '/'), 308);
    },
  );

  app.route({
    method: [...METHODS],
    url: '/v1/host-previews/:id/:port/*',
    exposeHeadRoute: false,
    schema: {
      tags,
      summary: 'Host-based previews (`<port>-<id>.<SBX_PREVIEW_DOMAIN>`, reached by Host, not by this path)',
      params: HostParams,
      security: [],
    },
    handler: async (request, reply) => {
      const host = previews.hostTarget(request.headers.host);
      if (host === null || request.params.id !== host.sandboxId || request.params.port !== host.port)
        throw new AppError('api.route_not_found', 'no such route');
      const original = request.originalUrl;
      const url = new URL(original, 'http://x');
      const queryToken = url.searchParams.get(PREVIEW_TOKEN_PARAM);
      const token = queryToken ?? cookieOf(request.headers.cookie, PREVIEW_COOKIE);
      if (token === null) throw new AppError('preview.url_invalid', 'open the signed preview URL first (it sets the preview cookie)');
      const { lease, grant } = await previews.grantOf(host.sandboxId, token, host.port);
      if (queryToken !== null) {
        // First visit: the token moves into a cookie of this host alone, and the URL loses it.
        url.searchParams.delete(PREVIEW_TOKEN_PARAM);
        const maxAge = Math.max(1, Math.floor((grant.expiresAt.getTime() - Date.now()) / 1000));
        const secure = request.protocol === 'https' ? '; Secure' : '';
        reply.header('set-cookie', `${PREVIEW_COOKIE}=${token}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure}`);
        return reply.redirect(`${url.pathname}${url.search}`, 302);
      }
      return serveFastify(previews, request, reply, {
        lease,
        port: grant.port,
        via: 'host',
        keyId: grant.keyId,
        tenant: lease.tenant,
        prefixSegments: 0,
        prefix: '',
        rawUrl: original,
      });
    },
  });
};

/**
 * The root of a preview host without its trailing slash (only reachable by this path itself, as
 * a rewrite always carries a `/`): the preview host's root.
 */
const hostRootRoute: FastifyPluginAsync<{ previews: PreviewService }> = async (plugin, { previews }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  app.get(
    '/v1/host-previews/:id/:port',
    { schema: { tags, summary: 'Redirects to the root of a preview host', params: PortParams, security: [] } },
    async (request, reply) => {
      const host = previews.hostTarget(request.headers.host);
      if (host === null || request.params.id !== host.sandboxId || request.params.port !== host.port)
        throw new AppError('api.route_not_found', 'no such route');
      return reply.redirect('/', 308);
    },
  );
};

/** Serves a preview routed by fastify (serve.ts `servePreview`): a handover hijacks the reply. */
function serveFastify(previews: PreviewService, request: FastifyRequest, reply: FastifyReply, target: PreviewTarget): Promise<void> {
  // The router matched an absolute-form target by its path: its segments are counted the same way.
  const exchange = { req: request.raw, res: reply.raw, protocol: request.protocol, hijack: () => reply.hijack() };
  return servePreview(previews, exchange, { ...target, rawUrl: originForm(target.rawUrl) });
}

/** `url` with a `/` after its path (query kept). */
function slashed(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? `${url}/` : `${url.slice(0, q)}/${url.slice(q)}`;
}

/** The value of cookie `name` in a Cookie header, or null. */
function cookieOf(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return null;
}

/** For app.ts: the URL a request on a preview host is routed as, or null when it is not on one. */
export function previewHostRewrite(previews: Pick<PreviewService, 'hostTarget'>, host: string | undefined, url: string): string | null {
  const target = previews.hostTarget(host);
  return target === null ? null : `/v1/host-previews/${target.sandboxId}/${target.port}${url.startsWith('/') ? url : `/${url}`}`;
}
