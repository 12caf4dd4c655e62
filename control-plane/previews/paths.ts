/**
 * What a preview request asks of the server in the sandbox: the path and query after the
 * preview prefix, taken from the raw request target. Pure; `paths.test.ts`.
 *
 * Safety rule: the remainder is forwarded byte for byte (percent-encodings untouched, so `%2F`
 * stays an encoded slash for the server in the sandbox to interpret), except that a request
 * whose path has a `.` or `..` segment — also spelled `%2e`/`%2E`, or made a segment by an
 * encoded slash (`%2F`) or a backslash (`\`, `%5C`) — or a NUL (`%00`) or a malformed
 * percent-encoding is refused as `preview.invalid_path` (400). The sandbox and the port come
 * from the router's match of the prefix alone, so nothing in the remainder can name another
 * sandbox or port; the refusal keeps servers that resolve dot segments themselves from being
 * walked above the preview's root, and clients that normalise URLs never send such paths anyway.
 */
import { AppError } from '../../contract/errors.js';
import { previewPathProblem } from '../../contract/preview-paths.js';

/**
 * `rawUrl` in origin form: an absolute-form target (`http://host/v1/...`, RFC 9112 §3.2.2)
 * loses its scheme and authority, so its segments count as the router matched them. Nothing
 * else changes (no normalisation: dot segments stay for upstreamTarget to refuse).
 */
export function originForm(rawUrl: string): string {
  const absolute = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(rawUrl);
  if (absolute === null) return rawUrl;
  const rest = rawUrl.slice(absolute[0].length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/**
 * The remainder of `rawUrl` (a request target: path and optional query) after its first
 * `prefixSegments` path segments, starting with `/`. Throws AppError `preview.invalid_path`.
 */
export function upstreamTarget(rawUrl: string, prefixSegments: number): string {
  const q = rawUrl.indexOf('?');
  const path = q < 0 ? rawUrl : rawUrl.slice(0, q);
  const query = q < 0 ? '' : rawUrl.slice(q);
  const parts = path.split('/');
  // parts[0] is the empty string before the leading slash.
  const rest = parts.slice(prefixSegments + 1);
  const problem = previewPathProblem(rest);
  if (problem !== null) throw invalid(problem);
  return `/${rest.join('/')}${query}`;
}

function invalid(what: string): AppError {
  return new AppError('preview.invalid_path', `the preview path has ${what}; send a normalised path`, { details: { reason: what } });
}

/**
 * The path of `rawUrl` after its first `prefixSegments` segments, query dropped and not checked:
 * what the preview log records of a request, also of one refused (never the prefix, which may
 * hold a signed token).
 */
export function loggedPath(rawUrl: string, prefixSegments: number): string {
  return `/${rawUrl
    .split('?')[0]!
    .split('/')
    .slice(prefixSegments + 1)
    .join('/')}`;
}
