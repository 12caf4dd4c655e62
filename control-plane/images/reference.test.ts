import { describe, expect, it } from 'vitest';
import { checkRegistry, parseImageRef } from './reference.js';

describe('image references', () => {
  it('takes apart registry, repository, tag and digest as Docker does', () => {
    expect(parseImageRef('sbx-sandbox:abc')).toEqual({ registry: null, repository: 'sbx-sandbox', tag: 'abc', digest: null });
    expect(parseImageRef('library/debian')).toEqual({ registry: null, repository: 'library/debian', tag: null, digest: null });
    expect(parseImageRef('127.0.0.1:5000/team/env:1')).toEqual({
      registry: '127.0.0.1:5000',
      repository: 'team/env',
      tag: '1',
      digest: null,
    });
    expect(parseImageRef('localhost/x')).toMatchObject({ registry: 'localhost', repository: 'x' });
    const digest = `sha256:${'a'.repeat(64)}`;
    expect(parseImageRef(`ghcr.io/o/r@${digest}`)).toMatchObject({ registry: 'ghcr.io', repository: 'o/r', digest });
  });

  it('refuses malformed and over-long references as image.invalid_reference naming the field', () => {
    for (const bad of [
      '',
      'UPPER/case',
      'a::b',
      'x:',
      'x@sha256:123',
      '/x',
      'x//y',
      'a'.repeat(256),
      'bad host!/x:1',
      'x:tag with space',
    ]) {
      expect(() => parseImageRef(bad), bad).toThrow(
        expect.objectContaining({ code: 'image.invalid_reference', details: expect.objectContaining({ field: 'image' }) }),
      );
    }
  });

  it('pulls only from allowlisted registries; a named registry off the list is refused, an unnamed one only never pulled', () => {
    const allow = ['127.0.0.1:5000'];
    expect(checkRegistry(parseImageRef('127.0.0.1:5000/x:1'), allow)).toEqual({ pullable: true });
    expect(checkRegistry(parseImageRef('sbx-sandbox:latest'), allow)).toEqual({ pullable: false });
    expect(checkRegistry(parseImageRef('debian:bookworm'), ['docker.io'])).toEqual({ pullable: true });
    expect(() => checkRegistry(parseImageRef('registry.example.com/x:1'), allow)).toThrow(
      expect.objectContaining({
        code: 'image.registry_not_allowed',
        details: expect.objectContaining({ registry: 'registry.example.com' }),
      }),
    );
    expect(() => checkRegistry(parseImageRef('127.0.0.1:5001/x'), allow)).toThrow(
      expect.objectContaining({ code: 'image.registry_not_allowed' }),
    );
  });
});
