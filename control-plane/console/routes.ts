/**
 * The admin console (`console/`): its built static files served at `/console/`. The routes are
 * public — the page holds no data; every API call it makes carries the admin key the user typed
 * in, and the API checks it as for any other client.
 */
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync } from 'fastify';

/** The route patterns the console registers; app.ts exempts exactly these from the API-key check. */
export const CONSOLE_ROUTES: readonly string[] = ['/console', '/console/*'];

/**
 * Same-origin only: the bundle, its stylesheet and API calls to this control plane. No inline
 * script or style, no framing: a value shown by the console cannot run as code, and the page
 * cannot load anything from elsewhere (a CDN, a tracker).
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export const consoleRoutes: FastifyPluginAsync<{ consoleDir: string }> = async (app, { consoleDir }) => {
  await app.register(fastifyStatic, {
    root: consoleDir,
    prefix: '/console',
    // `/console` → `/console/`, so the page's relative asset URLs resolve under the prefix.
    redirect: true,
    index: 'index.html',
    // The bundle's name is fixed: revalidate rather than let a browser keep last release's copy.
    cacheControl: false,
    setHeaders: (res) => {
      res.setHeader('cache-control', 'no-cache');
      res.setHeader('content-security-policy', CONTENT_SECURITY_POLICY);
      res.setHeader('x-content-type-options', 'nosniff');
      res.setHeader('referrer-policy', 'no-referrer');
    },
    // Other plugins' `reply.sendFile` would otherwise be able to serve from the console's root.
    decorateReply: false,
  });
};
