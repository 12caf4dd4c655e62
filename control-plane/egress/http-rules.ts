/**
 * L7 egress rules (issue 16 part 2): a host rule's `http` section allows or denies requests by
 * method and path. The proxy decides them on the request it reads — a plain-HTTP request, or an
 * HTTPS request it intercepts (intercept.ts; a host with `http` rules is always intercepted). Pure.
 *
 * Semantics: a request matching any `deny` entry is denied; else, when `allow` has entries, it
 * must match one; an entry matches when its `methods` (absent: any) hold the method and one of
 * its `paths` (absent: any) matches the path. Path patterns: `*` stands for any characters but
 * `/`, `**` for any characters; the query is not part of the path. A path not in normal form (a
 * `.` or `..` segment, `//`, or a percent-escape of `/`, `.` or `%`) is denied, since a server
 * may read it as another path than the pattern saw.
 */
import type { EgressDecision } from './rules.js';
import type { HttpMatch, HttpRules } from './schema.js';

/** A path pattern as a regular expression over the whole path. */
function patternRegex(pattern: string): RegExp {
  const body = pattern
    .split('**')
    .map((part) =>
      part
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('[^/]*'),
    )
    .join('.*');
  return new RegExp(`^${body}$`);
}

/** Whether `path` (no query) is in normal form: no dot segments, no empty segment, no escaped `/`, `.` or `%`. */
function normalPath(path: string): boolean {
  if (!path.startsWith('/') || path.includes('//')) return false;
  if (/%(2f|2e|25)/i.test(path)) return false;
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
