/**
 * L7 egress rules: the decision on method and path, and their schema.
 */
import { describe, expect, it } from 'vitest';
import { decideHttp } from './http-rules.js';
import { HttpRulesSchema, policyIntercepts, type HttpRules } from './schema.js';

const rules: HttpRules = {
  allow: [{ methods: ['GET', 'HEAD'] }, { methods: ['POST'], paths: ['/repos/acme/*/pulls'] }],
  deny: [{ paths: ['/admin/**'] }],
};
const decide = (method: string, target: string) => decideHttp(rules, 'allow[0] host api.test:443', method, target);

describe('decideHttp', () => {
  it('allows what an allow entry matches: methods, and paths with * in one segment (the query aside)', () => {
    expect(decide('GET', '/anything/at/all?x=1')).toEqual({ allowed: true, rule: 'allow[0] host api.test:443 http.allow[0]' });
    expect(decide('POST', '/repos/acme/app/pulls?draft=1')).toMatchObject({
      allowed: true,
      rule: expect.stringContaining('http.allow[1]'),
    });
    expect(decide('POST', '/repos/acme/app/sub/pulls')).toMatchObject({
      allowed: false,
      rule: expect.stringContaining('no allow entry matches POST'),
    });
    expect(decide('DELETE', '/repos/acme/app/pulls').allowed).toBe(false);
  });

  it('a deny entry wins over the allow entries; ** crosses segments, and a trailing /** matches the path without it', () => {
    expect(decide('GET', '/admin/users/1')).toMatchObject({ allowed: false, rule: expect.stringContaining('http.deny[0]') });
    expect(decide('GET', '/admin')).toMatchObject({ allowed: false, rule: expect.stringContaining('http.deny[0]') });
    expect(decide('GET', '/administrator').allowed).toBe(true);
    // Escapes of characters that need one stay allowed.
    expect(decide('GET', '/files/a%20b%3A').allowed).toBe(true);
  });

  it('a path not in normal form is denied, whatever the rules: dot segments, empty segments, escaped / . %, escapes of plain characters, \\ and ;', () => {
    const forms = ['/repos/acme/x/../../admin/pulls', '/./a', '//admin/x', '/admin%2fx', '/a/%2e%2e/admin', '/a%25', '/a%zz'];
    // Ways servers read another path than the pattern saw (found by review): %61 is `a`, `..;` Tomcat's, `\\` IIS's.
    const tricks = ['/%61dmin/users', '/x/..;/admin/users', '/x/..\\admin', '/x/%5c..%5cadmin', '/admin;jsessionid=x/users'];
    for (const target of [...forms, ...tricks]) {
      expect(decide('GET', target)).toMatchObject({ allowed: false, rule: expect.stringContaining('not in normal form') });
    }
  });

  it('with deny entries only, everything else is allowed', () => {
    expect(decideHttp({ deny: [{ methods: ['DELETE'] }] }, 'r', 'PUT', '/x')).toMatchObject({ allowed: true });
    expect(decideHttp({ deny: [{ methods: ['DELETE'] }] }, 'r', 'DELETE', '/x')).toMatchObject({ allowed: false });
  });
});

describe('the http section', () => {
  it('needs an entry; methods are upper case; paths start with / and carry no query', () => {
    expect(HttpRulesSchema.safeParse({}).success).toBe(false);
    expect(HttpRulesSchema.safeParse({ allow: [{ methods: ['get'] }] }).success).toBe(false);
    expect(HttpRulesSchema.safeParse({ allow: [{ paths: ['x/y'] }] }).success).toBe(false);
    expect(HttpRulesSchema.safeParse({ allow: [{ paths: ['/x?y=1'] }] }).success).toBe(false);
    expect(HttpRulesSchema.safeParse(rules).success).toBe(true);
  });

  it('makes its policy intercept, as an injection rule does', () => {
    const base = { network: { allow: [{ host: 'a.test', ports: [443] }] }, secrets: {} };
    expect(policyIntercepts(base)).toBe(false);
    expect(policyIntercepts({ ...base, network: { allow: [{ host: 'a.test', ports: [443], http: rules }] } })).toBe(true);
    expect(policyIntercepts({ ...base, secrets: { inject: [{}] } })).toBe(true);
  });
});
