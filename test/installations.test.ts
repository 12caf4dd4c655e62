/**
 * Two installations of sbx on one Docker engine (issue 11, defect 8): two control planes, each
 * with a Redis of its own (the second a private redis-server that deploy/local/redis.sh starts
 * for a temporary data dir), and the same owner label — as two installations left at the
 * default `SBX_OWNER` are. Each reconciles, and restarts (which reconciles at start), while the
 * other holds a sandbox: nobody loses one, and each releases its own. What an sbx from before
 * installation ids made (no `sbx.installation` label) is touched by neither, and
 * deploy/local/remove-legacy.sh removes it.
 *
 * The owner is one of this test's (`sbx-test-<run>-installations-…`), not the literal default `sbx`: on a
 * control plane without installation ids, reconcile with owner `sbx` would reap every sandbox of
 * every other sbx on this shared engine — the defect itself.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { processIdentity } from '../contract/data-dir.js';
import { REPO_ROOT, containersOf, docker, startHarness, testIdentity, type Harness } from './fixtures/index.js';

const run = promisify(execFile);
// The same prefix on both Redis servers too: only the Redis tells the two installations apart.
// Both under the run's own (test/fixtures/run.ts), so what a failed run leaves is found and removed.
const { owner, prefix } = testIdentity('installations');

let dataDirB: string;
let redisPidB: number | undefined;
let a: Harness | undefined;
let b: Harness | undefined;

beforeAll(async () => {
  dataDirB = await mkdtemp(join(tmpdir(), 'sbx-installations-'));
  await run('bash', [join(REPO_ROOT, 'deploy/local/redis.sh')], { env: { ...process.env, SBX_DATA_DIR: dataDirB } });
  redisPidB = Number((await readFile(join(dataDirB, 'redis', 'redis.pid'), 'utf8')).trim());
  a = await startHarness({ SBX_OWNER: owner, SBX_REDIS_PREFIX: prefix });
  b = await startHarness({ SBX_OWNER: owner, SBX_REDIS_PREFIX: prefix, SBX_DATA_DIR: dataDirB });
}, 120_000);

afterAll(async () => {
  await a?.close();
  await b?.close();
  await removeLegacy();
  if (redisPidB && processIdentity(redisPidB)) {
    process.kill(redisPidB, 'SIGTERM');
    await vi.waitFor(() => expect(processIdentity(redisPidB!)).toBeNull(), { timeout: 20_000, interval: 50 });
  }
  await rm(dataDirB, { recursive: true, force: true });
}, 120_000);

async function echo(h: Harness, leaseId: string, text: string): Promise<string | undefined> {
  const result = (await h.client.submitCall(leaseId, 'exec', { argv: ['echo', text] }, { waitSeconds: 60 })) as ToolResult;
  return result.stdout;
}

/** Reconciles on both control planes, as their background rounds do. */
async function reconcileBoth(): Promise<void> {
  await a!.plane.leases.reconcile();
  await b!.plane.leases.reconcile();
}

/** Restarts harness `h`'s control plane (a new one reconciles at start) and serves through it. */
async function restart(h: Harness): Promise<void> {
  await h.plane.close();
  const peer = await h.startPeer();
  h.plane = peer.plane;
  h.client = peer.client;
}

async function running(leaseId: string): Promise<boolean> {
  return (await docker('inspect', '-f', '{{.State.Running}}', `sbx-${leaseId}`).catch(() => 'gone')).trim() === 'true';
}

const legacyLease = `sbx_legacy${randomBytes(4).toString('hex')}`;
const legacyLabels = ['--label', `sbx.owner=${owner}`, '--label', `sbx.lease=${legacyLease}`];

async function removeLegacy(): Promise<void> {
  await docker('rm', '-f', '-v', `sbx-${legacyLease}`).catch(() => undefined);
  await docker('volume', 'rm', `sbx-${legacyLease}-spool`).catch(() => undefined);
}

describe('two installations on one engine, the same owner label', () => {
  it("reconcile and restarts on both take nobody's sandbox; each releases its own", async () => {
    const leaseA = await a!.client.createSandbox();
    const leaseB = await b!.client.createSandbox();

    await reconcileBoth();
    expect(await running(leaseA.id)).toBe(true);
    expect(await running(leaseB.id)).toBe(true);
    await restart(a!);
    await restart(b!);
    await reconcileBoth();

    expect(await running(leaseA.id)).toBe(true);
    expect(await running(leaseB.id)).toBe(true);
    expect((await a!.client.getSandbox(leaseA.id)).status).toBe('ready');
    expect((await b!.client.getSandbox(leaseB.id)).status).toBe('ready');
    expect(await echo(a!, leaseA.id, 'a')).toBe('a\n');
    expect(await echo(b!, leaseB.id, 'b')).toBe('b\n');

    // One owner, two installation ids, each on everything its control plane made.
    expect(a!.plane.ownership.owner).toBe(b!.plane.ownership.owner);
    expect(a!.plane.ownership.installation).not.toBe(b!.plane.ownership.installation);
    for (const [h, lease] of [
      [a!, leaseA],
      [b!, leaseB],
    ] as const) {
      expect((await docker('inspect', '-f', '{{index .Config.Labels "sbx.installation"}}', `sbx-${lease.id}`)).trim()).toBe(
        h.plane.ownership.installation,
      );
      const volumes = (await docker('volume', 'ls', '--filter', `label=sbx.lease=${lease.id}`, '--format', '{{.Label "sbx.installation"}}'))
        .split('\n')
        .filter(Boolean);
      expect(volumes.length).toBeGreaterThan(0);
      expect(new Set(volumes)).toEqual(new Set([h.plane.ownership.installation]));
    }

    expect((await a!.client.releaseSandbox(leaseA.id)).status).toBe('released');
    expect(await containersOf(owner)).toEqual([`sbx-${leaseB.id}`]);
    expect((await b!.client.releaseSandbox(leaseB.id)).status).toBe('released');
    expect(await containersOf(owner)).toEqual([]);
  }, 180_000);

  it('what an sbx from before installation ids made is touched by neither; remove-legacy.sh removes it', async () => {
    const lease = await b!.client.createSandbox();
    await docker('volume', 'create', ...legacyLabels, `sbx-${legacyLease}-spool`);
    await docker('create', '--name', `sbx-${legacyLease}`, ...legacyLabels, '--network', 'none', a!.config.image, 'sleep', 'infinity');

    await reconcileBoth();
    await restart(a!);
    expect(await containersOf(owner)).toEqual(expect.arrayContaining([`sbx-${legacyLease}`, `sbx-${lease.id}`]));
    expect(await docker('volume', 'ls', '-q', '--filter', `label=sbx.lease=${legacyLease}`)).toContain(`sbx-${legacyLease}-spool`);

    const { stdout } = await run('bash', [join(REPO_ROOT, 'deploy/local/remove-legacy.sh'), owner]);
    expect(stdout).toMatch(/^removed container [0-9a-f]+\nremoved volume sbx-sbx_legacy[0-9a-f]+-spool\n$/);
    expect(await containersOf(owner)).toEqual([`sbx-${lease.id}`]);
    expect(await running(lease.id)).toBe(true);
    expect(await echo(b!, lease.id, 'still here')).toBe('still here\n');
  }, 120_000);
});
