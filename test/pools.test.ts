/**
 * Warm pools against the real Docker engine and Redis: filled in the background, claimed
 * atomically, bound to the claiming lease (env, secrets), never reused, replaced when their
 * container dies, left alone by reconcile, shrunk when idle.
 */
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { buildImage, docker, execIn, eventually, removeImages, startHarness, tarBytes, useHarness } from './fixtures/index.js';

const POOLS = [
  { policy: 'default', min: 2, max: 3, idleSeconds: 4 },
  { policy: 'offline-ci', min: 1, max: 1 },
];

const h = useHarness({ SBX_WARM_POOLS: JSON.stringify(POOLS) }, { startTimeoutMs: 120_000 });

const readyKey = (policy: string): string => `${h.config.redisPrefix}pool:${policy}@${h.config.image}:ready`;
const readyIds = (policy = 'default'): Promise<string[]> => h.redis.lrange(readyKey(policy), 0, -1);
const members = async (): Promise<string[]> => Object.keys(await h.redis.hgetall(`${h.config.redisPrefix}pool:members`));

/** How long a pool may take to fill (each sandbox starts an agent; the machine is shared). */
const FILL_MS = 90_000;

const exec = execIn(() => h.client);

afterAll(removeImages);

describe('warm pools', () => {
  it(
    'fill to min in the background; a lease claims a ready sandbox and gets its own env, which the container config never held',
    { timeout: 120_000 },
    async () => {
      const ready = await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
      const lease = await h.client.createSandbox({ env: { FOO: 'warm-bound' } });
      expect(ready).toContain(lease.id);
      expect(await readyIds()).not.toContain(lease.id);
      expect(await members()).not.toContain(lease.id);
      expect((await exec(lease.id, 'printenv FOO')).stdout).toBe('warm-bound\n');
      expect(lease.manifest!.env.keys).toEqual(['FOO']);
      const inspect = JSON.parse(await docker('inspect', `sbx-${lease.id}`))[0];
      expect(JSON.stringify(inspect.Config.Env)).not.toContain('warm-bound');
      const metrics = await (await fetch(`${h.url}/metrics`)).text();
      expect(Number(/^sbx_lease_create_seconds_count\{path="warm"\} (\d+)/m.exec(metrics)?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
      expect(metrics).toMatch(
        new RegExp(`^sbx_pool_sandboxes\\{pool="default@${h.config.image.replace(/[.:]/g, '\\$&')}",state="ready"\\} \\d+`, 'm'),
      );
    },
  );

  it(
    'concurrent leases never share a sandbox: more requests than ready sandboxes all succeed, on distinct containers',
    { timeout: 180_000 },
    async () => {
      await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
      const before = new Set(await readyIds());
      const leases = await Promise.all(Array.from({ length: 5 }, () => h.client.createSandbox()));
      const ids = leases.map((l) => l.id);
      expect(new Set(ids).size).toBe(5);
      const containers = await Promise.all(ids.map(async (id) => (await docker('inspect', '-f', '{{.Id}}', `sbx-${id}`)).trim()));
      expect(new Set(containers).size).toBe(5);
      const warm = ids.filter((id) => before.has(id));
      expect(warm.length).toBeGreaterThanOrEqual(1);
      expect(warm.length).toBeLessThanOrEqual(before.size);
      for (const id of ids) expect((await exec(id, 'echo ok')).stdout).toBe('ok\n');
      await Promise.all(ids.map((id) => h.client.releaseSandbox(id)));
    },
  );

  it('a released pooled sandbox is gone for good, and the pool refills with new ones', { timeout: 120_000 }, async () => {
    await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
    const lease = await h.client.createSandbox();
    await h.client.releaseSandbox(lease.id);
    expect((await docker('ps', '-aq', '--filter', `name=sbx-${lease.id}`)).trim()).toBe('');
    const refilled = await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
    expect(refilled).not.toContain(lease.id);
    expect(await members()).not.toContain(lease.id);
  });

  it('a pooled sandbox whose container stops is replaced; reconcile leaves the others alone', { timeout: 120_000 }, async () => {
    const [victim, ...others] = await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
    await h.plane.leases.reconcile();
    expect(await members()).toEqual(expect.arrayContaining([victim!, ...others]));
    await docker('kill', `sbx-${victim}`);
    const after = await eventually(readyIds, (ids) => !ids.includes(victim!) && ids.length >= 2, FILL_MS);
    expect(after).toEqual(expect.arrayContaining(others));
    expect(await members()).not.toContain(victim);
  });

  it(
    'a claimed sandbox whose lease record is not written yet is no orphan to reconcile; unclaimed and unleased it is',
    { timeout: 120_000 },
    async () => {
      const [id] = await eventually(readyIds, (ids) => ids.length >= 1, FILL_MS);
      const p = h.config.redisPrefix;
      // What a claim does, held at the moment before the claiming lease's record exists.
      await h.redis
        .multi()
        .lrem(readyKey('default'), 1, id!)
        .hdel(`${p}pool:members`, id!)
        .hset(`${p}pool:claimed`, id!, String(Date.now()))
        .exec();
      await h.plane.leases.reconcile();
      expect((await docker('inspect', '-f', '{{.State.Running}}', `sbx-${id}`)).trim()).toBe('true');
      await h.redis.hdel(`${p}pool:claimed`, id!);
      await h.plane.leases.reconcile();
      expect((await docker('ps', '-aq', '--filter', `name=sbx-${id}`)).trim()).toBe('');
    },
  );

  it(
    'an orphaned pool sandbox removed by two removers at once (another remove in flight, then reconcile): reconcile waits for it, and its volumes go too',
    { timeout: 120_000 },
    async () => {
      const [id] = await eventually(readyIds, (ids) => ids.length >= 1, FILL_MS);
      const p = h.config.redisPrefix;
      await h.redis.multi().lrem(readyKey('default'), 1, id!).hdel(`${p}pool:members`, id!).exec();
      // Another remover first (as a pool replacing its member does), in flight while reconcile reaps.
      const other = new Docker({ socketPath: h.config.dockerSocket }).getContainer(`sbx-${id}`).remove({ force: true, v: true });
      await h.plane.leases.reconcile();
      await other.catch(() => undefined);
      expect((await docker('ps', '-aq', '--filter', `label=sbx.lease=${id}`)).trim()).toBe('');
      expect((await docker('volume', 'ls', '-q', '--filter', `label=sbx.lease=${id}`)).trim()).toBe('');
    },
  );

  it('grows to max while claimed, then shrinks back to min once idle', { timeout: 120_000 }, async () => {
    await eventually(readyIds, (ids) => ids.length >= 2, FILL_MS);
    const lease = await h.client.createSandbox();
    await eventually(readyIds, (ids) => ids.length === 3, FILL_MS);
    await h.client.releaseSandbox(lease.id);
    await eventually(readyIds, (ids) => ids.length === 2, 30_000);
  });

  it(
    'a pooled sandbox of the image its name named before a tag moved is not handed out: the lease runs the image the name names now',
    { timeout: 180_000 },
    async () => {
      const first = await buildImage('pool-tag', `FROM ${h.config.image}\nLABEL sbx.test.pool=first`);
      const second = await buildImage('pool-tag', `FROM ${h.config.image}\nLABEL sbx.test.pool=second`);
      const idOf = async (ref: string) => (await docker('image', 'inspect', '-f', '{{.Id}}', ref)).trim();
      const [firstId, secondId] = [await idOf(first), await idOf(second)];
      const other = await startHarness({ SBX_WARM_POOLS: JSON.stringify([{ policy: 'default', image: first, min: 1, max: 1 }]) });
      try {
        const readyOfFirst = () => other.redis.lrange(`${other.config.redisPrefix}pool:default@${first}:ready`, 0, -1);
        const [pooled] = await eventually(readyOfFirst, (ids) => ids.length >= 1, FILL_MS);
        await docker('tag', second, first);
        const lease = await other.client.createSandbox({ image: first });
        expect(lease.id).not.toBe(pooled);
        expect((await docker('inspect', '-f', '{{.Image}}', `sbx-${lease.id}`)).trim()).toBe(secondId);
        await eventually(
          () => docker('ps', '-a', '-q', '--filter', `label=sbx.lease=${pooled}`),
          (ids) => ids.trim() === '',
          30_000,
        );
      } finally {
        await other.close();
        // The name goes back to its first image, so removeImages removes both.
        await docker('tag', firstId, first);
      }
    },
  );

  it(
    "a tenant's built image named like a pool's image runs for that tenant, cold, and leaves the pool's sandboxes alone",
    { timeout: 180_000 },
    async () => {
      const other = await startHarness({ SBX_WARM_POOLS: JSON.stringify([{ policy: 'default', min: 1, max: 1 }]) });
      try {
        const readyIds = () => other.redis.lrange(`${other.config.redisPrefix}pool:default@${other.config.image}:ready`, 0, -1);
        const pooled = await eventually(readyIds, (ids) => ids.length >= 1, FILL_MS);
        const dockerfile = `FROM ${other.config.image}\nLABEL sbx.test.pool=tenant\n`;
        const { image } = await other.client.buildImage(await tarBytes([{ name: 'Dockerfile', content: dockerfile }]), {
          name: other.config.image,
        });
        const built = await eventually(
          () => other.client.getImage(image.id),
          (i) => i.status !== 'building',
          120_000,
        );
        expect(built.status).toBe('ready');
        const lease = await other.client.createSandbox({ image: other.config.image });
        expect(lease.id).not.toBe(pooled[0]);
        expect(lease.manifest?.image).toMatchObject({ id: built.engineImageId });
        expect(await readyIds()).toEqual(pooled);
      } finally {
        await other.close();
        const images = (await docker('images', '-q', '--filter', `label=sbx.owner=${other.config.owner}`)).split('\n').filter(Boolean);
        if (images.length > 0) await docker('rmi', '-f', ...new Set(images));
      }
    },
  );

  it('a claimed sandbox receives the secrets of its lease at claim time', { timeout: 120_000 }, async () => {
    await h.client.putSecret('NPM_TOKEN', 'npm-pooled-value');
    const [pooled] = await eventually(
      () => readyIds('offline-ci'),
      (ids) => ids.length >= 1,
      FILL_MS,
    );
    const lease = await h.client.createSandbox({ policy: 'offline-ci', secrets: [{ name: 'NPM_TOKEN' }] });
    expect(lease.id).toBe(pooled);
    const r = (await h.client.submitCall(
      lease.id,
      'exec',
      { cmd: 'test "$NPM_TOKEN" = npm-pooled-value && echo "$NPM_TOKEN"', secrets: ['NPM_TOKEN'] },
      { waitSeconds: 60 },
    )) as ToolResult;
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('[REDACTED:NPM_TOKEN]\n');
    expect(lease.manifest!.secretRefs).toEqual(['NPM_TOKEN']);
  });
});
