/**
 * Path-based previews (`/v1/sandboxes/:id/ports/:port/*`, signed `/v1/previews/:id/:token/*`)
 * serve an app under a prefix it does not know of, so what its answers say about its own paths
 * is moved under that prefix: a `Location` (redirect) that names a path of the app (`/login`, or
 * an absolute URL of the server itself, `http://localhost:<port>/login`) and a `Set-Cookie`
 * `Path` (`Path=/` would be a cookie for the whole API host; `Path=/app` would never be sent
 * back). Values already under the prefix (apps that honour `X-Forwarded-Prefix`), relative
 * references and other hosts pass unchanged. Host-based routing serves the app at `/` and
 * rewrites nothing. Pure; `rewrite.test.ts`.
 */

/** What the rewrite needs to know of the request: the prefix and the server's own port. */
export interface PrefixRewrite {
  /** The path prefix the app is served under (no trailing `/`), e.g. `/v1/sandboxes/sbx_…/ports/8000`. */
  prefix: string;
  /** The port in the sandbox: `localhost:<port>` is the Host the server was sent. */
  port: number;
}

/** `path` (starting with `/`) moved under the prefix, unless it already is there. */
function underPrefix(path: string, prefix: string): string {
  if (path === prefix || path.startsWith(`${prefix}/`) || path.startsWith(`${prefix}?`)) return path;
  return `${prefix}${path}`;
}

/** True when `host` (with port) is how the server in the sandbox was reached. */
function isUpstreamHost(host: string, port: number): boolean {
  const lower = host.toLowerCase();
  return lower === `localhost:${port}` || lower === `127.0.0.1:${port}` || lower === `[::1]:${port}`;
}

/** A `Location` value as the client must follow it. */
export function rewriteLocation(value: string, r: PrefixRewrite): string {
  if (value.startsWith('/') && !value.startsWith('//')) return underPrefix(value, r.prefix);
  const m = /^(?:https?:)?\/\/([^/?#]+)(.*)$/i.exec(value);
  if (!m || !isUpstreamHost(m[1]!, r.port)) return value;
  const rest = m[2]!;
  return underPrefix(rest.startsWith('/') ? rest : `/${rest}`, r.prefix);
}

/** A `Set-Cookie` value with its `Path` attribute (if any) under the prefix. */
export function rewriteSetCookie(value: string, r: PrefixRewrite): string {
  return value.replace(/(;\s*path\s*=\s*)([^;]*)/gi, (whole, lead: string, path: string) => {
    const trimmed = path.trim();
    return trimmed.startsWith('/') ? `${lead}${underPrefix(trimmed, r.prefix)}` : whole;
  });
}

/** The server's raw response headers (name, value pairs) with the rewrites above applied. */
export function rewriteResponseHeaders(raw: readonly string[], r: PrefixRewrite): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    const value = raw[i + 1]!;
    out.push(name, lower === 'location' ? rewriteLocation(value, r) : lower === 'set-cookie' ? rewriteSetCookie(value, r) : value);
  }
  return out;
}
