import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { Policy } from '../policies/schema.js';
import { locateInVolume } from './routes.js';

const policy = {
  filesystem: {
    readOnlyRoot: true,
    writableRoots: [
      { path: '/workspace', sizeBytes: 1 << 30, kind: 'volume' },
      { path: '/tmp', sizeBytes: 1 << 20, kind: 'tmpfs' },
    ],
  },
} as unknown as Policy;

describe('locateInVolume', () => {
  it('finds the volume root and the relative path after lexical normalization', () => {
    expect(locateInVolume(policy, '/workspace')).toEqual({ root: '/workspace', relative: '' });
    expect(locateInVolume(policy, '/workspace/a/b/')).toEqual({ root: '/workspace', relative: 'a/b' });
    expect(locateInVolume(policy, '/workspace/a/../b')).toEqual({ root: '/workspace', relative: 'b' });
  });

  it.each(['/etc', '/workspace/../etc', '/workspacex', '/tmp/x', '/run/sbx/agent'])('refuses %s', (path) => {
    expect(() => locateInVolume(policy, path)).toThrow(AppError);
  });
});
