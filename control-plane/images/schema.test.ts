import { describe, expect, it } from 'vitest';
import { BuildPolicy } from './schema.js';

describe('BuildPolicy', () => {
  it('defaults to network none', () => {
    expect(BuildPolicy.parse({}).network).toBe('none');
  });

  it('takes egress rules and the host[:port] shorthand (ports 80 and 443 by default)', () => {
    const policy = BuildPolicy.parse({
      network: {
        allow: ['deb.example.org', '*.pkg.example:8443', { cidr: '192.0.2.0/24', ports: [80] }, { host: 'x.example', ports: [1] }],
      },
    });
    expect(policy.network).toEqual({
      allow: [
        { host: 'deb.example.org', ports: [80, 443] },
        { host: '*.pkg.example', ports: [8443] },
        { cidr: '192.0.2.0/24', ports: [80] },
        { host: 'x.example', ports: [1] },
      ],
    });
  });

  it.each([
    ['an empty allowlist', { allow: [] }],
    ['an upper-case host', { allow: ['Deb.Example.org'] }],
    ['an address as a host', { allow: ['10.0.0.1'] }],
    ['port 0', { allow: ['deb.example.org:0'] }],
    ['port 70000', { allow: ['deb.example.org:70000'] }],
    ['a URL', { allow: ['http://deb.example.org/'] }],
    ['a bad cidr', { allow: [{ cidr: '10.0.0.0/33', ports: [80] }] }],
    ['an unknown key', { allow: ['deb.example.org'], open: true }],
    ['mode open', 'open'],
  ])('refuses %s', (_what, network) => {
    expect(BuildPolicy.safeParse({ network }).success).toBe(false);
  });
});
