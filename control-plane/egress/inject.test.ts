/**
 * Credential injection's pure half: placeholders, heads and streamed bodies.
 */
import { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { describe, expect, it } from 'vitest';
import { bodyInjector, injectHead, injectionsFor, placeholderKey, placeholderOf, type Injection } from './inject.js';
import { InjectRuleSchema, injectIssues } from './schema.js';

const key = placeholderKey(Buffer.alloc(32, 7));
const gh = placeholderOf(key, 'sbx_a', 'GH_TOKEN');
const api = placeholderOf(key, 'sbx_a', 'API_KEY');
const injections: Injection[] = [
  {
    rule: { secret: 'GH_TOKEN', hosts: ['api.github.test'], in: 'header', name: 'Authorization', template: 'Bearer {value}' },
    placeholder: gh,
    value: 'ghp_real',
  },
  { rule: { secret: 'API_KEY', hosts: ['*.api.test'], in: 'query', name: 'key' }, placeholder: api, value: 'k&v=1' },
  { rule: { secret: 'API_KEY', hosts: ['*.api.test'], in: 'body' }, placeholder: api, value: 'va"lue' },
];

describe('placeholders', () => {
  it('are sbxph_ and 40 hex digits, one per lease and secret, the same for the same key', () => {
    expect(gh).toMatch(/^sbxph_[0-9a-f]{40}$/);
    expect(new Set([gh, api, placeholderOf(key, 'sbx_b', 'GH_TOKEN')]).size).toBe(3);
    expect(placeholderOf(placeholderKey(Buffer.alloc(32, 7)), 'sbx_a', 'GH_TOKEN')).toBe(gh);
    expect(placeholderOf(placeholderKey(Buffer.alloc(32, 8)), 'sbx_a', 'GH_TOKEN')).not.toBe(gh);
  });
});

describe('injectHead', () => {
  const forHost = (host: string) => injectionsFor(host, injections);

  it('replaces the placeholder in the named header, also inside Basic credentials, and counts it', () => {
    const bearer = injectHead('/user', ['Authorization', `token ${gh}`, 'Accept', '*/*'], forHost('api.github.test'), injections);
    expect(bearer).toMatchObject({ headers: ['Authorization', 'token ghp_real', 'Accept', '*/*'], stray: [] });
    expect([...bearer.injected]).toEqual([['GH_TOKEN', 1]]);
    const basic = `Basic ${Buffer.from(`x-access-token:${gh}`).toString('base64')}`;
    const git = injectHead('/repo.git/info/refs', ['authorization', basic], forHost('api.github.test'), injections);
    expect(Buffer.from(git.headers[1]!.slice(6), 'base64').toString()).toBe('x-access-token:ghp_real');
  });

  it('adds the template header when the request has none; leaves a header without the placeholder alone', () => {
    expect(injectHead('/', [], forHost('api.github.test'), injections).headers).toEqual(['Authorization', 'Bearer ghp_real']);
    const own = injectHead('/', ['Authorization', 'Bearer mine'], forHost('api.github.test'), injections);
    expect([own.headers, own.injected.size]).toEqual([['Authorization', 'Bearer mine'], 0]);
  });

  it('replaces the placeholder in the named query parameter, percent-encoded, and nowhere else in the target', () => {
    const r = injectHead(`/q?a=1&key=${api}&other=${api}`, [], forHost('x.api.test'), injections);
    expect(r.path).toBe(`/q?a=1&key=k%26v%3D1&other=${api}`);
    expect(r.stray).toEqual(['API_KEY']);
  });

  it('never replaces a placeholder towards a host no rule names, and reports it as stray', () => {
    const r = injectHead(`/leak/${gh}`, ['Authorization', `Bearer ${gh}`], forHost('evil.test'), injections);
    expect(r.headers).toEqual(['Authorization', `Bearer ${gh}`]);
    expect([r.injected.size, r.stray]).toEqual([0, ['GH_TOKEN']]);
  });
});

describe('bodyInjector', () => {
  const swap = async (contentType: string, chunks: string[]): Promise<{ out: string; count: number }> => {
    let count = 0;
    const t = bodyInjector(contentType, injectionsFor('x.api.test', injections), () => (count += 1))!;
    const out = await text(Readable.from(chunks.map((c) => Buffer.from(c))).pipe(t));
    return { out, count };
  };

  it('replaces placeholders split across chunks, JSON-escaped in JSON, percent-encoded in forms', async () => {
    const body = `{"k":"${api}","n":"${api}"}`;
    const chunks = [body.slice(0, 10), body.slice(10, 20), body.slice(20, 21), body.slice(21)];
    expect(await swap('application/json; charset=utf-8', chunks)).toEqual({ out: '{"k":"va\\"lue","n":"va\\"lue"}', count: 2 });
    expect(await swap('application/x-www-form-urlencoded', [`a=1&k=${api}`])).toEqual({ out: 'a=1&k=va%22lue', count: 1 });
  });

  it('a placeholder at the end of a large body is replaced, with no more than one chunk held', async () => {
    const filler = 'x'.repeat(64 * 1024);
    const chunks = [...Array.from({ length: 160 }, () => filler), `"${api}"`];
    const { out, count } = await swap('application/json', chunks);
    expect([out.length, out.endsWith('"va\\"lue"'), count]).toEqual([160 * filler.length + '"va\\"lue"'.length, true, 1]);
  });

  it('is null for other bodies and for hosts without a body rule', () => {
    expect(bodyInjector('text/plain', injectionsFor('x.api.test', injections), () => undefined)).toBeNull();
    expect(bodyInjector('application/json', injectionsFor('api.github.test', injections), () => undefined)).toBeNull();
  });
});

describe('inject rules', () => {
  it('a header or query rule needs a name, a body rule has none, only a header rule has a template', () => {
    expect(InjectRuleSchema.safeParse({ secret: 'A', hosts: ['a.test'], in: 'header' }).success).toBe(false);
    expect(InjectRuleSchema.safeParse({ secret: 'A', hosts: ['a.test'], in: 'body', name: 'x' }).success).toBe(false);
    expect(InjectRuleSchema.safeParse({ secret: 'A', hosts: ['a.test'], in: 'query', name: 'k', template: '{value}' }).success).toBe(false);
    expect(InjectRuleSchema.safeParse({ secret: 'A', hosts: ['a.test'], in: 'header', name: 'X-Key', template: 'no value' }).success).toBe(
      false,
    );
  });

  it('need the allowlist mode, an allowed secret, and hosts the allowlist lets through', () => {
    const rule = { secret: 'A', hosts: ['a.test', '*.b.test', 'c.test'], in: 'body' };
    const network = {
      mode: 'allowlist',
      allow: [
        { host: 'a.test', ports: [443] },
        { host: '*.b.test', ports: [443] },
      ],
    };
    expect(injectIssues([rule], ['A'], network)).toEqual([
      { path: 'secrets.inject.0.hosts.2', message: 'c.test is not let through by a network.allow host rule' },
    ]);
    expect(injectIssues([rule], [], { mode: 'none' }).map((i) => i.path)).toEqual([
      'secrets.inject',
      'secrets.inject.0.secret',
      'secrets.inject.0.hosts.0',
      'secrets.inject.0.hosts.1',
      'secrets.inject.0.hosts.2',
    ]);
  });
});
