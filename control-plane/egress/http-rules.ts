/**
 * L7 egress rules (issue 16 part 2): a host rule's `http` section allows or denies requests by
 * method and path. The proxy decides them on the request it reads — a plain-HTTP request, or an
 * HTTPS request it intercepts (intercept.ts; a host with `http` rules is always intercepted). Pure.
 *
 * Semantics: a request matching any `deny` entry is denied; else, when `allow` has entries, it
 * must match one; an entry matches when its `methods` (absent: any) hold the method and one of
 * its `paths` (absent: any) matches the path. Path patterns: `*` stands for any characters but
 * `/`, `**` for any characters (a trailing `/**` also matches the path without it); the query is
 * not part of the path; matching is case-sensitive. A path not in normal form (normalPath) is
 * denied, since a server may read it as another path than the pattern saw.
 */
import type { EgressDecision } from './rules.js';
import type { HttpMatch, HttpRules } from './schema.js';

/** A path pattern as a regular expression over the whole path; a trailing `/**` also matches the path without it. */
function patternRegex(pattern: string): RegExp {
  const tail = pattern.endsWith('/**');
  const body = (tail ? pattern.slice(0, -3) : pattern)
    .split('**')
    .map((part) =>
      part
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('[^/]*'),
    )
    .join('.*');
  return new RegExp(`^${body}${tail ? '(/.*)?' : ''}$`);
}

/**
 * Whether `path` (no query) is in a form every server reads as the pattern does: no dot or empty
 * segments, no `\` (IIS reads it as `/`), no `;` (path parameters, and Tomcat's `..;`), and no
 * percent-escape of a character that needs none or of `/`, `\`, `%`, `;` (servers that decode
 * `%61` to `a` would see another path).
 */
function normalPath(path: string): boolean {
  if (!path.startsWith('/') || path.includes('//') || /[\\;]/.test(path)) return false;
  for (const m of path.matchAll(/%([0-9a-f]{2})/gi)) {
    const c = String.fromCharCode(parseInt(m[1]!, 16));
    if (/[A-Za-z0-9\-._~/\\%;]/.test(c)) return false;
  }
  if (/%(?![0-9a-f]{2})/i.test(path)) return false;
  return !path.split('/').some((segment) => segment === '.' || segment === '..');
}

const matches = (entry: HttpMatch, method: string, path: string): boolean =>
  (entry.methods === undefined || entry.methods.includes(method)) &&
  (entry.paths === undefined || entry.paths.some((p) => patternRegex(p).test(path)));

/**
 * The decision on one request: `rule` names the host rule (`allow[2] host api.example.com:443`)
 * and the entry that decided, or why none allowed it. `target` is the request target (path and
 * query).
 */
export function decideHttp(http: HttpRules, ruleText: string, method: string, target: string): EgressDecision {
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  if (!normalPath(path)) return { allowed: false, rule: `${ruleText} http: path not in normal form` };
  const deny = (http.deny ?? []).findIndex((e) => matches(e, method, path));
  if (deny >= 0) return { allowed: false, rule: `${ruleText} http.deny[${deny}]` };
  const allow = http.allow ?? [];
  if (allow.length === 0) return { allowed: true, rule: `${ruleText} http (no deny entry matched)` };
  const index = allow.findIndex((e) => matches(e, method, path));
  return index >= 0
    ? { allowed: true, rule: `${ruleText} http.allow[${index}]` }
    : { allowed: false, rule: `${ruleText} http: no allow entry matches ${method} ${path.slice(0, 200)}` };
}
