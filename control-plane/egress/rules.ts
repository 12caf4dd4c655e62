/**
 * Egress decisions of an allowlist policy: which (host, port) a sandbox may reach, and whether
 * the address a name resolved to may be dialled. Pure: no DNS, no sockets, no clock.
 *
 * Two checks, both required for a connection by name:
 * 1. `matchDestination(host, port)`: a `host` rule names the host exactly or as `*.suffix` (any
 *    name below the suffix, not the suffix itself) and lists the port. An IP literal needs a
 *    `cidr` rule containing it instead.
 * 2. `checkAddress(address, port)`: the address the proxy resolved and will dial. Only ordinary
 *    public unicast is allowed by a host rule alone; loopback, private (RFC 1918, RFC 4193),
 *    link-local (RFC 3927, incl. 169.254.169.254, and fe80::/10), carrier-grade NAT, multicast,
 *    reserved, and IPv6 forms that embed an IPv4 address (v4-mapped, NAT64, 6to4, Teredo) need a
 *    `cidr` rule that contains the address and lists the port. Ranges as classified by
 *    ipaddr.js `range()` (IANA special-purpose registries, RFC 6890).
 */
import ipaddr from 'ipaddr.js';
import { digestOf } from '../../contract/digest.js';
import { hostPatternMatches, type HttpRules } from './schema.js';

/** One allowlist rule of a policy (`network.allow[]`). */
export type EgressRule = { host: string; ports: number[]; http?: HttpRules } | { cidr: string; ports: number[] };

/** Why a connection was allowed or denied: the rule index and text, or the refusal's reason. */
export interface EgressDecision {
  allowed: boolean;
  /** `allow[2] host *.example.com:443`, `no matching rule`, `link-local address` … */
  rule: string;
}

/** The digest of an allowlist (sha256 of its canonical JSON), recorded in the manifest. */
export function allowlistDigest(rules: readonly EgressRule[]): string {
  return digestOf(rules);
}

/** The compiled allowlist of one lease. */
export class EgressAllowlist {
  private readonly cidrs: Array<{ index: number; range: [ipaddr.IPv4 | ipaddr.IPv6, number]; ports: number[]; text: string }>;

  constructor(private readonly rules: readonly EgressRule[]) {
    this.cidrs = [];
    rules.forEach((rule, index) => {
      if ('cidr' in rule)
        this.cidrs.push({
          index,
          range: ipaddr.parseCIDR(rule.cidr),
          ports: rule.ports,
          text: `allow[${index}] cidr ${rule.cidr}:${rule.ports.join(',')}`,
        });
    });
  }

  /**
   * First check, before any DNS: `host` is a name (lower-cased here) or an IP literal (IPv6
   * with or without brackets). Denied unless a rule names it and its port.
   */
  matchDestination(host: string, port: number): EgressDecision {
    const literal = parseAddress(host);
    if (literal) return this.checkAddress(literal.toString(), port, { literal: true });
    const name = host.toLowerCase().replace(/\.$/, '');
    for (const [index, rule] of this.rules.entries()) {
      if (!('host' in rule) || !hostPatternMatches(rule.host, name)) continue;
      if (rule.ports.includes(port)) return { allowed: true, rule: `allow[${index}] host ${rule.host}:${rule.ports.join(',')}` };
    }
    return { allowed: false, rule: `no rule allows ${name}:${port}` };
  }

  /** The `http` section of the host rule that allows `host`:`port` (the one matchDestination picks), and its text; null when it has none. */
  httpOf(host: string, port: number): { http: HttpRules; rule: string } | null {
    const name = host.toLowerCase().replace(/\.$/, '');
    for (const [index, rule] of this.rules.entries()) {
      if (!('host' in rule) || !hostPatternMatches(rule.host, name) || !rule.ports.includes(port)) continue;
      return rule.http ? { http: rule.http, rule: `allow[${index}] host ${rule.host}:${rule.ports.join(',')}` } : null;
    }
    return null;
  }

  /**
   * Second check, on the address about to be dialled (after the proxy's own resolution, so a
   * name that re-resolves to an internal address is caught). With `literal`, the address was
   * asked for by number and needs a cidr rule even when public.
   */
  checkAddress(address: string, port: number, { literal = false } = {}): EgressDecision {
    const parsed = parseAddress(address);
    if (!parsed) return { allowed: false, rule: `not an IP address: ${address}` };
    for (const cidr of this.cidrs) {
      if (parsed.kind() === cidr.range[0].kind() && parsed.match(cidr.range) && cidr.ports.includes(port))
        return { allowed: true, rule: cidr.text };
    }
    const range = parsed.range();
    if (literal) return { allowed: false, rule: `no cidr rule allows ${parsed.toString()}:${port}` };
    // ipaddr.js calls every IPv6 address outside its special ranges `unicast`, the deprecated
    // IPv4-compatible ::a.b.c.d included; only global unicast (2000::/3, RFC 4291 §2.4) is public.
    if (range === 'unicast' && (parsed.kind() === 'ipv4' || parsed.match(GLOBAL_UNICAST_V6)))
      return { allowed: true, rule: 'public unicast address' };
    return { allowed: false, rule: `${RANGE_NAMES[range] ?? range} address ${parsed.toString()} needs a cidr rule` };
  }
}

/** An IP literal as an address object; IPv4-mapped IPv6 becomes the IPv4 address it carries. */
function parseAddress(text: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  // ipaddr.isValid accepts shorthand IPv4 like "1" or "0x7f.1"; the proxy only takes the full
  // dotted-quad or IPv6 forms, since resolvers and HTTP clients disagree on the others.
  if (!ipaddr.IPv4.isValidFourPartDecimal(bare) && !(bare.includes(':') && ipaddr.IPv6.isValid(bare))) return undefined;
  return ipaddr.process(bare);
}

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

const RANGE_NAMES: Record<string, string> = {
  loopback: 'loopback',
  private: 'private',
  linkLocal: 'link-local',
  uniqueLocal: 'unique-local',
  carrierGradeNat: 'carrier-grade NAT',
  unspecified: 'unspecified',
  multicast: 'multicast',
  broadcast: 'broadcast',
  reserved: 'reserved',
};
