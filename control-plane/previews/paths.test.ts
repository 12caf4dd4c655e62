import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { originForm, upstreamTarget } from './paths.js';

const prefix = '/v1/sandboxes/sbx_1/ports/8000';

describe('upstreamTarget', () => {
  it('forwards the remainder and the query byte for byte', () => {
    expect(upstreamTarget(`${prefix}/`, 5)).toBe('/');
    expect(upstreamTarget(`${prefix}/a/b.txt?x=1&y=%20`, 5)).toBe('/a/b.txt?x=1&y=%20');
    expect(upstreamTarget(`${prefix}/api/a%2Fb/c`, 5)).toBe('/api/a%2Fb/c');
    expect(upstreamTarget(`${prefix}/..dots../x.`, 5)).toBe('/..dots../x.');
    expect(upstreamTarget('/?a=../..', 0)).toBe('/?a=../..');
  });

  it('refuses dot segments however spelled, NUL and bad encodings', () => {
    for (const tail of ['/..', '/a/../b', '/./a', '/%2e%2e/x', '/%2E./x', '/a%2F..%2Fb', '/a\\..\\b', '/a%5C..', '/%00', '/%zz'])
      expect(() => upstreamTarget(`${prefix}${tail}`, 5), tail).toThrowError(AppError);
  });
});

describe('originForm', () => {
  it('drops the scheme and authority of an absolute-form target, nothing else', () => {
    expect(originForm(`http://127.0.0.1:7070${prefix}/a?x=1`)).toBe(`${prefix}/a?x=1`);
    expect(originForm(`HTTPS://h${prefix}/../x`)).toBe(`${prefix}/../x`);
    expect(originForm('http://h?x=1')).toBe('/?x=1');
    expect(originForm(`${prefix}/http://x/y`)).toBe(`${prefix}/http://x/y`);
  });
});
