import { describe, expect, it } from 'vitest';
import { EgressAllowlist, allowlistDigest, type EgressRule } from './rules.js';

const rules: EgressRule[] = [
  { host: 'api.example.com', ports: [443] },
  { host: '*.pkg.example', ports: [80, 443] },
  { cidr: '10.20.0.0/16', ports: [8080] },
  { cidr: 'fd00:1::/64', ports: [443] },
];
const allowlist = new EgressAllowlist(rules);

describe('egress allowlist: destination match (before DNS)', () => {
  it('allows an exact host on a listed port, case-insensitively and with a trailing dot', () => {
    expect(allowlist.matchDestination('api.example.com', 443)).toEqual({ allowed: true, rule: 'allow[0] host api.example.com:443' });
    expect(allowlist.matchDestination('API.Example.COM.', 443).allowed).toBe(true);
  });

  it('denies a listed host on an unlisted port', () => {
    expect(allowlist.matchDestination('api.example.com', 80)).toEqual({ allowed: false, rule: 'no rule allows api.example.com:80' });
  });

  it('matches *.suffix for names below the suffix only, not the suffix or look-alikes', () => {
    expect(allowlist.matchDestination('a.pkg.example', 443).allowed).toBe(true);
    expect(allowlist.matchDestination('a.b.pkg.example', 80).allowed).toBe(true);
    expect(allowlist.matchDestination('pkg.example', 443).allowed).toBe(false);
    expect(allowlist.matchDestination('evilpkg.example', 443).allowed).toBe(false);
    expect(allowlist.matchDestination('a.pkg.example.evil.test', 443).allowed).toBe(false);
  });

  it('needs a cidr rule for an IP literal, even a public one', () => {
    expect(allowlist.matchDestination('10.20.3.4', 8080).allowed).toBe(true);
    expect(allowlist.matchDestination('10.20.3.4', 80).allowed).toBe(false);
    expect(allowlist.matchDestination('93.184.216.34', 443)).toEqual({ allowed: false, rule: 'no cidr rule allows 93.184.216.34:443' });
    expect(allowlist.matchDestination('[fd00:1::5]', 443).allowed).toBe(true);
  });

  it('denies the cloud metadata address and IPv4-mapped IPv6 spellings of internal addresses', () => {
    expect(allowlist.matchDestination('169.254.169.254', 80).allowed).toBe(false);
    expect(allowlist.matchDestination('[::ffff:169.254.169.254]', 80).allowed).toBe(false);
    expect(allowlist.matchDestination('::ffff:10.20.3.4', 8080)).toEqual({ allowed: true, rule: 'allow[2] cidr 10.20.0.0/16:8080' });
  });

  it('treats shorthand IPv4 spellings as names, so they can only pass by a host rule', () => {
    expect(allowlist.matchDestination('0x7f.1', 80).allowed).toBe(false);
    expect(allowlist.matchDestination('2130706433', 80).allowed).toBe(false);
  });
});

describe('egress allowlist: resolved address check (after the proxy resolved the name)', () => {
  it('allows public unicast addresses of an allowed name', () => {
    expect(allowlist.checkAddress('93.184.216.34', 443)).toEqual({ allowed: true, rule: 'public unicast address' });
    expect(allowlist.checkAddress('2606:2800:220:1::1', 443).allowed).toBe(true);
  });

  it.each([
    ['127.0.0.1', 'loopback'],
    ['::1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.17.0.2', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'link-local'],
    ['fe80::1', 'link-local'],
    ['fd12::1', 'unique-local'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['0.0.0.0', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['::ffff:127.0.0.1', 'loopback'],
  ])('denies %s (%s) without a cidr rule: a name re-resolving inward is caught', (address, range) => {
    const decision = allowlist.checkAddress(address, 443);
    expect(decision.allowed).toBe(false);
    expect(decision.rule).toContain(range);
  });

  it('denies IPv6 forms that carry an IPv4 address (NAT64, 6to4, the deprecated IPv4-compatible ::a.b.c.d)', () => {
    expect(allowlist.checkAddress('64:ff9b::a01:203', 443).allowed).toBe(false);
    expect(allowlist.checkAddress('2002:a01:203::1', 443).allowed).toBe(false);
    for (const compatible of ['::7f00:1', '::a00:1', '::a9fe:a9fe'])
      expect(allowlist.checkAddress(compatible, 443).allowed, compatible).toBe(false);
  });

  it('allows an internal address only with a cidr rule that lists the port', () => {
    expect(allowlist.checkAddress('10.20.9.9', 8080)).toEqual({ allowed: true, rule: 'allow[2] cidr 10.20.0.0/16:8080' });
    expect(allowlist.checkAddress('10.20.9.9', 443).allowed).toBe(false);
    expect(allowlist.checkAddress('10.21.0.1', 8080).allowed).toBe(false);
  });

  it('an empty allowlist allows nothing', () => {
    const none = new EgressAllowlist([]);
    expect(none.matchDestination('api.example.com', 443).allowed).toBe(false);
    expect(none.matchDestination('93.184.216.34', 443).allowed).toBe(false);
  });
});

describe('allowlist digest', () => {
  it('changes with any rule and not with key order', () => {
    expect(allowlistDigest([{ host: 'a.test', ports: [443] }])).toBe(allowlistDigest([{ ports: [443], host: 'a.test' }]));
    expect(allowlistDigest([{ host: 'a.test', ports: [443] }])).not.toBe(allowlistDigest([{ host: 'a.test', ports: [80] }]));
  });
});
