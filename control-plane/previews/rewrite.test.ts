import { describe, expect, it } from 'vitest';
import { rewriteLocation, rewriteResponseHeaders, rewriteSetCookie } from './rewrite.js';

const r = { prefix: '/v1/sandboxes/sbx_a/ports/8000', port: 8000 };

describe('path-based preview rewrites', () => {
  it("moves a redirect to one of the app's paths under the prefix, keeping its query and fragment", () => {
    expect(rewriteLocation('/login', r)).toBe(`${r.prefix}/login`);
    expect(rewriteLocation('/', r)).toBe(`${r.prefix}/`);
    expect(rewriteLocation('/a?next=/b#top', r)).toBe(`${r.prefix}/a?next=/b#top`);
  });

  it('moves an absolute URL of the server itself under the prefix, as a path', () => {
    expect(rewriteLocation('http://localhost:8000/next?x=1', r)).toBe(`${r.prefix}/next?x=1`);
    expect(rewriteLocation('http://127.0.0.1:8000', r)).toBe(`${r.prefix}/`);
    expect(rewriteLocation('//LOCALHOST:8000/p', r)).toBe(`${r.prefix}/p`);
  });

  it('leaves relative references, other hosts, other ports and paths already under the prefix alone', () => {
    for (const v of ['login', '../up', '?page=2', 'https://example.com/x', 'http://localhost:9000/x', '//cdn.test/x', `${r.prefix}/done`])
      expect(rewriteLocation(v, r)).toBe(v);
  });

  it("puts a cookie's Path under the prefix, whatever its case and spacing; a cookie without Path is unchanged", () => {
    expect(rewriteSetCookie('sid=1; Path=/; HttpOnly', r)).toBe(`sid=1; Path=${r.prefix}/; HttpOnly`);
    expect(rewriteSetCookie('sid=1; path = /app', r)).toBe(`sid=1; path = ${r.prefix}/app`);
    expect(rewriteSetCookie(`sid=1; Path=${r.prefix}/x`, r)).toBe(`sid=1; Path=${r.prefix}/x`);
    expect(rewriteSetCookie('sid=1; Max-Age=60', r)).toBe('sid=1; Max-Age=60');
    // A value that only looks like the attribute is not one.
    expect(rewriteSetCookie('path=/x; Secure', r)).toBe('path=/x; Secure');
  });

  it('rewrites only Location and Set-Cookie, keeping the order and the names as sent', () => {
    expect(rewriteResponseHeaders(['LOCATION', '/a', 'Set-Cookie', 'a=1; Path=/', 'Set-Cookie', 'b=2', 'X-Path', '/x'], r)).toEqual([
      'LOCATION',
      `${r.prefix}/a`,
      'Set-Cookie',
      `a=1; Path=${r.prefix}/`,
      'Set-Cookie',
      'b=2',
      'X-Path',
      '/x',
    ]);
  });
});
