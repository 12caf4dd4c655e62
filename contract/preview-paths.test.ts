import { describe, expect, it } from 'vitest';
import { previewPathProblem } from './preview-paths.js';

const problemOf = (path: string): string | null => previewPathProblem(path.split('/').slice(1));

describe('previewPathProblem', () => {
  it('accepts normalised paths, dots inside names and encoded slashes between names', () => {
    for (const path of ['/', '/a/b.txt', '/..dots../x.', '/api/a%2Fb/c', '/%20x']) expect(problemOf(path), path).toBeNull();
  });

  it('names dot segments however spelled, NUL and bad encodings', () => {
    for (const path of ['/..', '/a/../b', '/./a', '/%2e%2e/x', '/%2E./x', '/a%2F..%2Fb', '/a\\..\\b', '/a%5C..'])
      expect(problemOf(path), path).toBe('a "." or ".." segment');
    expect(problemOf('/%00')).toBe('a NUL byte');
    expect(problemOf('/%zz')).toBe('a malformed percent-encoding');
  });
});
