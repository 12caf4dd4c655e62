/**
 * Schemas of the egress domain: the host pattern and the allowlist rule that a policy's
 * `network.allow` and the build policy's `network.allow` both hold (semantics in rules.ts).
 */
import ipaddr from 'ipaddr.js';
import { z } from 'zod';

/** Host patterns a rule may hold: a DNS name, or `*.` + a DNS name (lower case). */
export const HOST_PATTERN = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

const Ports = z.array(z.number().int().min(1).max(65535)).min(1).max(64);

/** One entry of a host rule's `http` section (L7 rules, semantics in http-rules.ts): methods (upper case) and path patterns (from `/`). */
export const HttpMatchSchema = z
  .object({
    methods: z
      .array(z.string().regex(/^[A-Z]{1,20}$/, 'an upper-case HTTP method'))
      .min(1)
      .max(16)
      .optional(),
    paths: z
      .array(
        z
          .string()
          .max(512)
          .regex(/^\/[^\s?#]*$/, 'a path pattern from /, without a query'),
      )
      .min(1)
      .max(64)
      .optional(),
  })
  .strict();
export type HttpMatch = z.infer<typeof HttpMatchSchema>;

/** A host rule's `http` section. */
export const HttpRulesSchema = z
  .object({ allow: z.array(HttpMatchSchema).max(64).optional(), deny: z.array(HttpMatchSchema).max(64).optional() })
  .strict()
  .refine((r) => (r.allow?.length ?? 0) + (r.deny?.length ?? 0) > 0, 'needs an allow or a deny entry');
export type HttpRules = z.infer<typeof HttpRulesSchema>;

/**
 * One egress allowlist rule: a host (`api.example.com`, or `*.example.com` for names below it)
 * or a CIDR block (`10.0.0.0/8`, `fd00::/8`), each with the ports it may use.
 */
export const EgressRuleSchema = z.union([
  z
    .object({
      host: z.string().max(253).regex(HOST_PATTERN, 'a lower-case DNS name, optionally starting with "*."'),
      ports: Ports,
      /** L7 rules on method and path (http-rules.ts); an HTTPS host with them is intercepted. */
      http: HttpRulesSchema.optional(),
    })
    .strict(),
  z.object({ cidr: z.string().refine((c) => ipaddr.isValidCIDR(c), 'an IPv4 or IPv6 CIDR block like 10.0.0.0/8'), ports: Ports }).strict(),
]);

/** HTTP header names (RFC 9110 §5.1 token), and query parameter names as they appear unescaped. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
const QUERY_NAME = /^[A-Za-z0-9_.~-]{1,128}$/;

/**
 * One credential injection rule (`secrets.inject[]`): the egress proxy puts the value of
 * `secret` into requests to `hosts` (patterns as in `network.allow`), in place of the lease's
 * placeholder for it (control-plane/egress/inject.ts): in header `name`, in query parameter
 * `name`, or in a JSON or form body. `template` is the header a request without header `name`
 * gets (`{value}` stands for the value); without it, such a request is left as it is.
 */
export const InjectRuleSchema = z
  .object({
    secret: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'a secret name'),
    hosts: z.array(z.string().max(253).regex(HOST_PATTERN, 'a lower-case DNS name, optionally starting with "*."')).min(1).max(32),
    in: z.enum(['header', 'query', 'body']),
    name: z.string().optional(),
    template: z
      .string()
      .max(1024)
      .refine((t) => t.includes('{value}'), 'must contain {value}')
      .optional(),
  })
  .strict()
  .superRefine((rule, ctx) => {
    if (rule.in === 'body' && rule.name !== undefined) ctx.addIssue({ code: 'custom', path: ['name'], message: 'a body rule has no name' });
    if (rule.in !== 'body' && (rule.name === undefined || !(rule.in === 'header' ? HEADER_NAME : QUERY_NAME).test(rule.name)))
      ctx.addIssue({
        code: 'custom',
        path: ['name'],
        message: `a ${rule.in} rule needs the ${rule.in === 'header' ? 'header' : 'parameter'} name`,
      });
    if (rule.template !== undefined && rule.in !== 'header')
      ctx.addIssue({ code: 'custom', path: ['template'], message: 'only a header rule has a template' });
  });
export type InjectRule = z.infer<typeof InjectRuleSchema>;

/** Whether host pattern `pattern` covers `name` (lower case): `*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`. */
export function hostPatternMatches(pattern: string, name: string): boolean {
  if (pattern.startsWith('*.')) return name.endsWith(pattern.slice(1)) && name.length > pattern.length - 1;
  return pattern === name;
}

/**
 * Cross-field rules of injection: the secret is one the policy allows, the network mode is
 * `allowlist` (the proxy is the only way out), and each host is one a `network.allow` host rule
 * lets through (an injection never widens the allowlist). Returns issues as `{path, message}`.
 */
export function injectIssues(inject: unknown, allowedSecrets: unknown, network: unknown): Array<{ path: string; message: string }> {
  if (!Array.isArray(inject) || inject.length === 0) return [];
  const issues: Array<{ path: string; message: string }> = [];
  const net = (network ?? {}) as { mode?: unknown; allow?: unknown };
  if (net.mode !== 'allowlist') issues.push({ path: 'secrets.inject', message: 'credential injection needs network.mode "allowlist"' });
  const hostRules = Array.isArray(net.allow)
    ? net.allow.filter((r): r is { host: string } => typeof (r as { host?: unknown })?.host === 'string')
    : [];
  inject.forEach((rule: { secret?: unknown; hosts?: unknown }, i) => {
    if (Array.isArray(allowedSecrets) && typeof rule?.secret === 'string' && !allowedSecrets.includes(rule.secret))
      issues.push({ path: `secrets.inject.${i}.secret`, message: `${rule.secret} is not in secrets.allowed` });
    if (!Array.isArray(rule?.hosts)) return;
    rule.hosts.forEach((host: unknown, j: number) => {
      if (typeof host !== 'string') return;
      // A wildcard host is covered by a wildcard rule of the same or a shorter suffix.
      const probe = host.startsWith('*.') ? `x${host.slice(1)}` : host;
      if (!hostRules.some((r) => hostPatternMatches(r.host, probe) && (!host.startsWith('*.') || r.host.startsWith('*.'))))
        issues.push({ path: `secrets.inject.${i}.hosts.${j}`, message: `${host} is not let through by a network.allow host rule` });
    });
  });
  return issues;
}

/**
 * Whether a policy's egress proxy ends TLS for some host (intercept.ts): a credential injection
 * rule, or a host rule with `http` rules. Its sandboxes then trust a lease CA (ca.ts).
 */
export function policyIntercepts(policy: {
  network: { allow: readonly object[] };
  secrets: { inject?: readonly unknown[] };
  phases?: ReadonlyArray<{ network: { allow: readonly object[] } }>;
}): boolean {
  const l7 = (allow: readonly object[]): boolean => allow.some((rule) => 'http' in rule && rule.http !== undefined);
  // A phased policy's sandbox is made once, for every phase it may move to.
  return (policy.secrets.inject ?? []).length > 0 || l7(policy.network.allow) || (policy.phases ?? []).some((p) => l7(p.network.allow));
}
