/**
 * A lease's own writable roots (`writableRoots` of `POST /v1/sandboxes`), checked against its
 * policy's `filesystem.leaseWritableRoots` and merged into the policy the lease runs with. Pure:
 * no Docker, no Redis, unit-tested in `writable-roots.test.ts`.
 */
import { posix } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { WritableRootEntry } from '../../contract/objects.js';
import { isReservedRootPath, type LeaseWritableRootRule, type Policy } from '../policies/schema.js';

/** One writable root a lease asks for: an absolute path and, optionally, its size in bytes. */
export interface LeaseRootRequest {
  path: string;
  sizeBytes?: number | undefined;
}

/**
 * The policy a lease runs with: `policy` with the lease's roots added to
 * `filesystem.writableRoots` (kind `volume`, seeded from the image), and the manifest's list
 * of every writable root (`source`: `policy` or `lease`).
 *
 * A root without `sizeBytes` gets the smaller of the rule's `maxSizeBytes` and the memory the
 * policy's roots leave (writable roots are tmpfs-backed: together they stay within
 * `resources.memoryBytes`, so a full root is ENOSPC, never an OOM kill).
 *
 * Throws AppError, before anything is made:
 * - `lease.writable_root_invalid` (400): a path that is not absolute, not in normal form
 *   (`..`, `.`, `//`, trailing `/`), `/` or under /proc, /sys, /dev, /run, /opt/sbx; asked twice, or
 *   overlapping (equal, above or below) a root of the policy, another asked root or a read-only
 *   mount (`details.reason`: `not_absolute`, `not_normal`, `reserved`, `duplicate`, `overlap`);
 * - `policy.writable_root_denied` (403): no pattern of the policy's `leaseWritableRoots` matches;
 * - `lease.writable_root_too_large` (400): `sizeBytes` above the rule's `maxSizeBytes`, or all
 *   roots together above `resources.memoryBytes`.
 */
export function withLeaseRoots(policy: Policy, requested: readonly LeaseRootRequest[]): { policy: Policy; roots: WritableRootEntry[] } {
  const fs = policy.filesystem;
  const policyRoots: WritableRootEntry[] = fs.writableRoots.map((r) => ({
    path: r.path,
    sizeBytes: r.sizeBytes,
    kind: r.kind,
    source: 'policy',
    fromImage: r.fromImage,
  }));
  if (requested.length === 0) return { policy, roots: policyRoots };
  let usedBytes = fs.writableRoots.reduce((sum, r) => sum + r.sizeBytes, 0);
  const added: WritableRootEntry[] = [];
  requested.forEach((r, i) => {
    const field = `writableRoots.${i}.path`;
    const invalid = (reason: string, message: string, extra: Record<string, unknown> = {}): AppError =>
      new AppError('lease.writable_root_invalid', message, { details: { field, path: r.path, reason, ...extra } });
    if (!r.path.startsWith('/')) throw invalid('not_absolute', `writable root ${r.path} is not an absolute path`);
    if (r.path.includes('\0') || posix.normalize(r.path) !== r.path || (r.path !== '/' && r.path.endsWith('/')))
      throw invalid('not_normal', `writable root ${r.path} is not in normal form (no //, . or .. segments, no trailing /)`);
    if (isReservedRootPath(r.path))
      throw invalid('reserved', `writable root ${r.path} would cover / or lie under /proc, /sys, /dev, /run or /opt/sbx`);
    if (added.some((a) => a.path === r.path)) throw invalid('duplicate', `writable root ${r.path} is asked for twice`);
    const clash = [...policyRoots, ...added].find((a) => overlaps(a.path, r.path));
    if (clash) throw invalid('overlap', `writable root ${r.path} overlaps the writable root ${clash.path}`, { with: clash.path });
    const mount = fs.readOnlyMounts.find((m) => overlaps(m.containerPath, r.path));
    if (mount)
      throw invalid('overlap', `writable root ${r.path} overlaps the read-only mount ${mount.containerPath}`, {
        with: mount.containerPath,
      });
    const rule = fs.leaseWritableRoots.find((p) => matchesPattern(p.path, r.path));
    if (!rule) {
      throw new AppError('policy.writable_root_denied', `policy ${policy.name} does not let a lease make ${r.path} writable`, {
        details: { field, path: r.path, allowed: fs.leaseWritableRoots.map((p) => p.path) },
      });
    }
    const sizeBytes = r.sizeBytes ?? Math.min(rule.maxSizeBytes, Math.max(0, policy.resources.memoryBytes - usedBytes));
    tooLarge(policy, rule, r.path, sizeBytes, usedBytes, i);
    usedBytes += sizeBytes;
    added.push({ path: r.path, sizeBytes, kind: 'volume', source: 'lease', fromImage: true });
  });
  const writableRoots = [
    ...fs.writableRoots,
    ...added.map((a) => ({ path: a.path, sizeBytes: a.sizeBytes, kind: 'volume' as const, fromImage: true })),
  ];
  return { policy: { ...policy, filesystem: { ...fs, writableRoots } }, roots: [...policyRoots, ...added] };
}

function tooLarge(policy: Policy, rule: LeaseWritableRootRule, path: string, sizeBytes: number, usedBytes: number, i: number): void {
  const field = `writableRoots.${i}.sizeBytes`;
  if (sizeBytes > rule.maxSizeBytes) {
    throw new AppError(
      'lease.writable_root_too_large',
      `writable root ${path}: sizeBytes ${sizeBytes} is above the policy's ${rule.maxSizeBytes}`,
      {
        details: { field, path, sizeBytes, maxSizeBytes: rule.maxSizeBytes },
      },
    );
  }
  const memoryBytes = policy.resources.memoryBytes;
  if (sizeBytes < 1024 * 1024 || usedBytes + sizeBytes > memoryBytes) {
    throw new AppError(
      'lease.writable_root_too_large',
      `writable root ${path}: ${sizeBytes} bytes do not fit; the sandbox's writable roots are memory-backed and together may hold at most resources.memoryBytes ${memoryBytes}, ${Math.max(0, memoryBytes - usedBytes)} of which are left`,
      { details: { field, path, sizeBytes, maxSizeBytes: Math.max(0, memoryBytes - usedBytes), memoryBytes } },
    );
  }
}

/** True when `a` and `b` (absolute, normal form) are equal or one lies below the other. */
function overlaps(a: string, b: string): boolean {
  return a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
}

/** True when `path` matches `pattern` segment by segment (`*`: exactly one segment, any name). */
export function matchesPattern(pattern: string, path: string): boolean {
  const p = pattern.split('/');
  const s = path.split('/');
  return p.length === s.length && p.every((seg, i) => seg === '*' || seg === s[i]);
}
