/**
 * Proposals from denials, the pure half: what is proposed, what never is, and nothing for what
 * the policy allows by now.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { EgressEvent } from '../../contract/objects.js';
import { propose } from './proposals.js';
import { Policy } from './schema.js';

const base = Policy.parse(parseYaml(readFileSync(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));
const policy: Policy = {
  ...base,
  network: {
    mode: 'allowlist',
    allow: [
      { host: 'api.test', ports: [443], http: { allow: [{ methods: ['GET'] }], deny: [{ paths: ['/admin/**'] }] } },
      { host: 'pkg.test', ports: [443] },
    ],
  },
};
const denied = (host: string, port: number, rule: string, method = 'CONNECT', path?: string): { leaseId: string; event: EgressEvent } => ({
  leaseId: 'sbx_1',
  event: {
    at: '2026-12-04T00:00:00.000Z',
    host,
    port,
    method,
    decision: 'denied',
    rule,
    address: null,
    bytesIn: 0,
    bytesOut: 0,
    durationMs: 0,
    error: null,
    ...(path ? { path } : {}),
  },
});

describe('propose', () => {
  it('a port a host rule lacks extends that rule; a new host gets its own; denials of one host are one change', () => {
    const { changes, proposed } = propose(policy, [
      denied('pkg.test', 8443, 'no rule allows pkg.test:8443'),
      denied('new.test', 443, 'no rule allows new.test:443'),
      denied('new.test', 80, 'no rule allows new.test:80'),
    ]);
    expect(changes.map(({ evidence: _e, ...c }) => c)).toEqual([
      { kind: 'add_ports', ruleIndex: 1, host: 'pkg.test', ports: [8443], denials: 1 },
      { kind: 'add_host', host: 'new.test', ports: [80, 443], denials: 2 },
    ]);
    expect(proposed.network.allow.slice(1)).toEqual([
      { host: 'pkg.test', ports: [443, 8443] },
      { host: 'new.test', ports: [80, 443] },
    ]);
  });

  it('what a sandbox asked for never becomes a pattern: a * host or path, a trailing dot; an L7 change goes to the rule of that host now (found by review)', () => {
    const { changes, notProposed } = propose(policy, [
      denied('*.com', 443, 'no rule allows *.com:443'),
      denied('x.test.', 443, 'no rule allows x.test.:443'),
      denied('api.test', 443, 'allow[7] host api.test:443 http: no allow entry matches POST /**', 'POST', '/**'),
      denied('api.test', 443, 'allow[7] host api.test:443 http: no allow entry matches POST /new', 'POST', '/new'),
    ]);
    expect(changes.map(({ evidence: _e, ...c }) => c)).toEqual([
      { kind: 'add_http_allow', ruleIndex: 0, host: 'api.test', methods: ['POST'], paths: ['/new'], denials: 1 },
    ]);
    expect(notProposed).toMatchObject([{ reason: expect.stringContaining('not a plain host name or path'), denials: 3 }]);
  });

  it('an explicit deny entry and an address are never proposed; what the policy allows by now is not proposed again', () => {
    const { changes, notProposed } = propose(policy, [
      denied('api.test', 443, 'allow[0] host api.test:443 http.deny[0]', 'GET', '/admin/x'),
      denied('10.0.0.1', 443, 'no cidr rule allows 10.0.0.1:443'),
      denied('pkg.test', 443, 'no rule allows pkg.test:443'),
    ]);
    expect(changes).toEqual([]);
    expect(notProposed.map((n) => n.reason)).toEqual([
      expect.stringContaining('not overridden'),
      'an IP address: add a cidr rule deliberately',
    ]);
  });
});
