import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { checkMountPaths } from './mounts.js';
import { MountPath } from './schema.js';

const taken = ['/workspace', '/tmp', '/home/sandbox'];

function refusal(requests: Array<{ name: string; path: string }>): string | null {
  try {
    checkMountPaths(requests, taken);
    return null;
  } catch (err) {
    if (err instanceof AppError) return err.code;
    throw err;
  }
}

describe('volume mount paths', () => {
  it('accepts paths apart from the kernel, sbx and the policy', () => {
    expect(
      refusal([
        { name: 'a', path: '/cache' },
        { name: 'b', path: '/data/set' },
        { name: 'c', path: '/home/other' },
      ]),
    ).toBeNull();
    expect(refusal([{ name: 'a', path: '/run/cache' }])).toBeNull();
    expect(refusal([{ name: 'a', path: '/procfs' }])).toBeNull();
  });

  it('refuses /, the kernel and sbx paths, over or under them', () => {
    for (const path of [
      '/',
      '/proc',
      '/proc/1',
      '/sys',
      '/dev',
      '/dev/shm',
      '/run/sbx',
      '/run/sbx/agent',
      '/run',
      '/run/secrets',
      '/opt/sbx',
      '/opt',
    ])
      expect([path, refusal([{ name: 'a', path }])]).toEqual([path, 'volume.mount_path_reserved']);
  });

  it('refuses a policy root or another volume of the lease, on, over or under it', () => {
    for (const path of ['/workspace', '/workspace/x', '/tmp', '/home', '/home/sandbox/.cache'])
      expect([path, refusal([{ name: 'a', path }])]).toEqual([path, 'volume.mount_path_conflict']);
    expect(
      refusal([
        { name: 'a', path: '/d' },
        { name: 'b', path: '/d' },
      ]),
    ).toBe('volume.mount_path_conflict');
    expect(
      refusal([
        { name: 'a', path: '/d/e' },
        { name: 'b', path: '/d' },
      ]),
    ).toBe('volume.mount_path_conflict');
    // A prefix that is not a parent is no conflict.
    expect(
      refusal([
        { name: 'a', path: '/data' },
        { name: 'b', path: '/data2' },
      ]),
    ).toBeNull();
  });

  it('refuses the same volume twice', () => {
    expect(
      refusal([
        { name: 'a', path: '/x' },
        { name: 'a', path: '/y' },
      ]),
    ).toBe('volume.mounted_twice');
  });

  it('takes only absolute normalized paths', () => {
    for (const ok of ['/', '/a', '/a/b.c', '/a/.hidden']) expect(MountPath.safeParse(ok).success).toBe(true);
    for (const bad of ['a', '', '/a/', '//a', '/a/../b', '/a/./b', '/a b', '/a\nb', `/${'x'.repeat(255)}`])
      expect([bad, MountPath.safeParse(bad).success]).toEqual([bad, false]);
  });
});
