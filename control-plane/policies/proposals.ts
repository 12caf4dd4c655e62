/**
 * From denial to proposal (issue 16 part 5), the pure half: the denied egress events of a
 * policy's leases turned into the smallest change of its allowlist that would have let them
 * through, each change with its evidence. The service (proposal-service.ts) reads the events and
 * writes an accepted proposal as the policy's next version.
 *
 * What is proposed: a host no rule names gets a host rule with the ports it was asked on (or an
 * existing rule of that exact host gets the ports); a request an `http` section had no allow
 * entry for gets an allow entry for its method and exact path. What never is: an explicit `deny`
 * entry overridden, an address (loopback, private, link-local...) or an IP literal, which needs a
 * deliberate `cidr` rule, and paths not in normal form. Those are listed as `notProposed`.
 */
import type { EgressEvent } from '../../contract/objects.js';
import { decideHttp } from '../egress/http-rules.js';
import { EgressAllowlist } from '../egress/rules.js';
import { HOST_PATTERN } from '../egress/schema.js';
import type { Policy } from './schema.js';

/** One denied event and the lease it happened in. */
export interface Denial {
  leaseId: string;
  event: EgressEvent;
}

/** Where one proposed change comes from: the lease and call, when, and what was asked. */
export interface Evidence {
  leaseId: string;
  /** The call whose processes asked (their proxy credential), or null when the request named none. */
  callId: string | null;
  at: string;
  host: string;
  port: number;
  method: string;
  path: string | null;
}

/** One change of the allowlist. */
export type ProposalChange =
  | { kind: 'add_host'; host: string; ports: number[]; evidence: Evidence[]; denials: number }
  | { kind: 'add_ports'; ruleIndex: number; host: string; ports: number[]; evidence: Evidence[]; denials: number }
  | { kind: 'add_http_allow'; ruleIndex: number; host: string; methods: string[]; paths: string[]; evidence: Evidence[]; denials: number };

export interface Proposal {
  changes: ProposalChange[];
  /** Denials no change is proposed for, and why. */
  notProposed: Array<{ reason: string; evidence: Evidence[]; denials: number }>;
  /** The policy with every change made (`version` left as it was: the service sets the next one). */
  proposed: Policy;
}

/** Evidence kept per change: the newest ones; `denials` counts them all. */
const EVIDENCE_MAX = 20;

const NO_RULE = /^no rule allows /;
const L7_NO_ALLOW = / http: no allow entry matches /;
const IP_LITERAL = /^(\d{1,3}(\.\d{1,3}){3}|.*:.*)$/;

function evidenceOf(d: Denial): Evidence {
  return {
    leaseId: d.leaseId,
    callId: d.event.callId ?? null,
    at: d.event.at,
    host: d.event.host,
    port: d.event.port,
    method: d.event.method,
    path: d.event.path ?? null,
  };
}

/** Groups `items` by `key`, keeping their order. */
function groupBy<T>(items: readonly T[], key: (t: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(key(item), [...(groups.get(key(item)) ?? []), item]);
  return groups;
}

const newest = (ds: readonly Denial[]): Evidence[] =>
  ds
    .map(evidenceOf)
    .sort((a, b) => b.at.localeCompare(a.at))
    .slice(0, EVIDENCE_MAX);

/** The proposal for `policy` from `denials` (any order; events of the egress log, `decision: denied`). */
export function propose(policy: Policy, denials: readonly Denial[]): Proposal {
  const rules = policy.network.allow;
  const changes: ProposalChange[] = [];
  const notProposed: Proposal['notProposed'] = [];
  const noRule: Denial[] = [];
  const l7: Array<Denial & { ruleIndex: number }> = [];
  const other = new Map<string, Denial[]>();
  const current = new EgressAllowlist(rules);
  for (const d of denials) {
    if (d.event.decision !== 'denied' || stillAllowedNow(current, d.event)) continue;
    const literal = IP_LITERAL.test(d.event.host);
    // What a sandbox asked for becomes a rule only when it is a plain name and a plain path: `*.com`
    // or a path `/**` would turn one request into a wildcard.
    const plainHost = HOST_PATTERN.test(d.event.host) && !d.event.host.includes('*');
    const plainPath = d.event.path === undefined || !/[*\\]/.test(d.event.path);
    const l7Rule = L7_NO_ALLOW.test(d.event.rule)
      ? rules.findIndex((r) => 'host' in r && r.host === d.event.host && r.http !== undefined)
      : -1;
    if (NO_RULE.test(d.event.rule) && !literal && plainHost) noRule.push(d);
    else if (l7Rule >= 0 && plainPath) l7.push({ ...d, ruleIndex: l7Rule });
    else {
      const reason = literal
        ? 'an IP address: add a cidr rule deliberately'
        : !plainHost || !plainPath
          ? 'not a plain host name or path: never made into a pattern'
          : L7_NO_ALLOW.test(d.event.rule)
            ? 'no host rule of that exact name with http rules in the latest version'
            : `denied by ${d.event.rule.replace(/ [^ ]*$/, '')}: not overridden`;
      other.set(reason, [...(other.get(reason) ?? []), d]);
    }
  }
  for (const [host, ds] of groupBy(noRule, (d) => d.event.host.toLowerCase())) {
    const ports = [...new Set(ds.map((d) => d.event.port))].sort((a, b) => a - b);
    const index = rules.findIndex((r) => 'host' in r && r.host === host);
    changes.push(
      index >= 0
        ? { kind: 'add_ports', ruleIndex: index, host, ports, evidence: newest(ds), denials: ds.length }
        : { kind: 'add_host', host, ports, evidence: newest(ds), denials: ds.length },
    );
  }
  for (const [, ds] of groupBy(l7, (d) => `${d.ruleIndex} ${d.event.method}`)) {
    const ruleIndex = ds[0]!.ruleIndex;
    const paths = [...new Set(ds.map((d) => d.event.path ?? '/'))].sort();
    changes.push({
      kind: 'add_http_allow',
      ruleIndex,
      host: ds[0]!.event.host,
      methods: [ds[0]!.event.method],
      paths,
      evidence: newest(ds),
      denials: ds.length,
    });
  }
  for (const [reason, ds] of other) notProposed.push({ reason, evidence: newest(ds), denials: ds.length });
  return { changes, notProposed, proposed: applyChanges(policy, changes) };
}

/** Whether the policy as it is now lets `event` through (a version after the denial allowed it): nothing to propose then. */
function stillAllowedNow(allowlist: EgressAllowlist, event: EgressEvent): boolean {
  if (!allowlist.matchDestination(event.host, event.port).allowed) return false;
  // An address check is not redone (it needs the resolution of then); only a name the rules now allow, with its L7 rules.
  if (!NO_RULE.test(event.rule) && !L7_NO_ALLOW.test(event.rule)) return false;
  const l7 = allowlist.httpOf(event.host, event.port);
  return l7 === null || event.path === undefined || decideHttp(l7.http, l7.rule, event.method, event.path).allowed;
}

/** `policy` with `changes` made: the smallest additions to `network.allow`. */
export function applyChanges(policy: Policy, changes: readonly ProposalChange[]): Policy {
  const allow = structuredClone(policy.network.allow);
  for (const change of changes) {
    if (change.kind === 'add_host') allow.push({ host: change.host, ports: change.ports });
    else {
      const rule = allow[change.ruleIndex];
      if (rule === undefined || !('host' in rule)) continue;
      if (change.kind === 'add_ports') rule.ports = [...new Set([...rule.ports, ...change.ports])].sort((a, b) => a - b);
      else rule.http = { ...rule.http, allow: [...(rule.http?.allow ?? []), { methods: change.methods, paths: change.paths }] };
    }
  }
  return { ...policy, network: { ...policy.network, allow } };
}
