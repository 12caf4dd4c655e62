import { describe, expect, it } from 'vitest';
import type { AppError } from '../../contract/errors.js';
import { Policy } from '../policies/schema.js';
import { matchesPattern, withLeaseRoots } from './writable-roots.js';

const MiB = 1024 ** 2;
const policy = Policy.parse({
  name: 'p',
  version: 1,
  filesystem: {
    writableRoots: [
      { path: '/workspace', sizeBytes: 256 * MiB, kind: 'volume' },
      { path: '/tmp', sizeBytes: 64 * MiB, fromImage: false },
    ],
    readOnlyMounts: [{ hostPath: '/srv/shared', containerPath: '/data' }],
    leaseWritableRoots: [
      { path: '/testbed', maxSizeBytes: 128 * MiB },
      { path: '/home/*', maxSizeBytes: 64 * MiB },
      { path: '/big', maxSizeBytes: 1024 * MiB },
    ],
  },
  network: { mode: 'none' },
  resources: { cpus: 1, memoryBytes: 512 * MiB, pids: 128, openFiles: 1024, ttlSeconds: 60, maxTtlSeconds: 600 },
  runtime: { toolUser: { name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox' } },
  tools: { exec: { defaultTimeoutMs: 1000, maxTimeoutMs: 2000, maxOutputBytes: 4096 } },
});

const refusal = (requested: Array<{ path: string; sizeBytes?: number }>) => {
  try {
    withLeaseRoots(policy, requested);
  } catch (err) {
    const e = err as { code: string; details: { reason?: string } };
    return { code: e.code, reason: e.details.reason };
  }
  return null;
};

describe('lease writable roots', () => {
  it('without any, the policy is unchanged and the manifest lists its roots as source policy', () => {
    const { policy: p, roots } = withLeaseRoots(policy, []);
    expect(p).toBe(policy);
    expect(roots).toEqual([
      { path: '/workspace', sizeBytes: 256 * MiB, kind: 'volume', source: 'policy', fromImage: true },
      { path: '/tmp', sizeBytes: 64 * MiB, kind: 'tmpfs', source: 'policy', fromImage: false },
    ]);
  });

  it('adds allowed roots as seeded volumes, sized as asked or by the rule within the memory left', () => {
    const { policy: p, roots } = withLeaseRoots(policy, [{ path: '/testbed' }, { path: '/home/alice', sizeBytes: 2 * MiB }]);
    expect(p.filesystem.writableRoots.slice(2)).toEqual([
      { path: '/testbed', sizeBytes: 128 * MiB, kind: 'volume', fromImage: true },
      { path: '/home/alice', sizeBytes: 2 * MiB, kind: 'volume', fromImage: true },
    ]);
    expect(roots.slice(2).map((r) => r.source)).toEqual(['lease', 'lease']);
    // 512 MiB memory − 320 MiB of policy roots leaves 192 MiB: the default is capped there.
    expect(withLeaseRoots(policy, [{ path: '/big' }]).roots[2]!.sizeBytes).toBe(192 * MiB);
  });

  it('refuses each bad path with its code and reason, before anything is made', () => {
    expect(refusal([{ path: 'testbed' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'not_absolute' });
    expect(refusal([{ path: '/home/x/../../etc' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'not_normal' });
    expect(refusal([{ path: '/testbed/' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'not_normal' });
    expect(refusal([{ path: '//testbed' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'not_normal' });
    for (const path of ['/', '/proc', '/sys/fs', '/dev', '/run/sbx', '/run/sbx/agent', '/run'])
      expect(refusal([{ path }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'reserved' });
    expect(refusal([{ path: '/testbed' }, { path: '/testbed' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'duplicate' });
    expect(refusal([{ path: '/workspace' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'overlap' });
    expect(refusal([{ path: '/workspace/sub' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'overlap' });
    expect(refusal([{ path: '/data' }])).toEqual({ code: 'lease.writable_root_invalid', reason: 'overlap' });
    expect(refusal([{ path: '/etc' }])).toEqual({ code: 'policy.writable_root_denied', reason: undefined });
    expect(refusal([{ path: '/home/a/b' }])).toEqual({ code: 'policy.writable_root_denied', reason: undefined });
    expect(refusal([{ path: '/home' }])).toEqual({ code: 'policy.writable_root_denied', reason: undefined });
  });

  it('refuses a size over the rule or over the memory the policy roots leave', () => {
    expect(refusal([{ path: '/testbed', sizeBytes: 129 * MiB }])?.code).toBe('lease.writable_root_too_large');
    expect(refusal([{ path: '/big', sizeBytes: 193 * MiB }])?.code).toBe('lease.writable_root_too_large');
    expect(refusal([{ path: '/big' }, { path: '/testbed' }])?.code).toBe('lease.writable_root_too_large');
  });

  it('matches patterns segment by segment, * for exactly one segment', () => {
    expect(matchesPattern('/home/*', '/home/alice')).toBe(true);
    expect(matchesPattern('/home/*', '/home')).toBe(false);
    expect(matchesPattern('/home/*', '/home/alice/src')).toBe(false);
    expect(matchesPattern('/testbed', '/testbed')).toBe(true);
    expect(matchesPattern('/testbed', '/testbed2')).toBe(false);
  });

  it('a root at or under the agent runtime mount /opt/sbx is reserved, though /opt/* is allowed (was a 503 Duplicate mount point)', () => {
    const withOpt = { ...policy, filesystem: { ...policy.filesystem, leaseWritableRoots: [{ path: '/opt/*', maxSizeBytes: 64 * MiB }] } };
    const code = (path: string) => {
      try {
        withLeaseRoots(withOpt, [{ path }]);
        return 'ok';
      } catch (err) {
        return (err as AppError).details?.reason ?? (err as AppError).code;
      }
    };
    expect(code('/opt/sbx')).toBe('reserved');
    expect(code('/opt/tool')).toBe('ok');
  });

  it('the policy schema refuses patterns over reserved paths', () => {
    const bad = (path: string) =>
      Policy.safeParse({ ...policy, filesystem: { ...policy.filesystem, leaseWritableRoots: [{ path, maxSizeBytes: MiB }] } }).success;
    expect(bad('/testbed')).toBe(true);
    for (const path of ['/', '/*', '/proc/*', '/run/sbx', '/opt/sbx', '/opt/sbx/*', '/dev', 'rel', '/a/../b', '/a/'])
      expect(bad(path), path).toBe(false);
  });
});
