/**
 * Schemas of the egress domain: the host pattern and the allowlist rule that a policy's
 * `network.allow` and the build policy's `network.allow` both hold (semantics in rules.ts).
 */
import ipaddr from 'ipaddr.js';
import { z } from 'zod';

/** Host patterns a rule may hold: a DNS name, or `*.` + a DNS name (lower case). */
export const HOST_PATTERN = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

const Ports = z.array(z.number().int().min(1).max(65535)).min(1).max(64);

/**
 * One egress allowlist rule: a host (`api.example.com`, or `*.example.com` for names below it)
 * or a CIDR block (`10.0.0.0/8`, `fd00::/8`), each with the ports it may use.
 */
export const EgressRuleSchema = z.union([
  z
    .object({ host: z.string().max(253).regex(HOST_PATTERN, 'a lower-case DNS name, optionally starting with "*."'), ports: Ports })
    .strict(),
  z.object({ cidr: z.string().refine((c) => ipaddr.isValidCIDR(c), 'an IPv4 or IPv6 CIDR block like 10.0.0.0/8'), ports: Ports }).strict(),
]);
