/**
 * The warm pools with fakes of their ports (an in-memory pool store, a launcher that starts
 * nothing, a runtime listing): claims, and what a maintenance round does.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { PolicyRef, SandboxFacts } from '../../contract/objects.js';
import type { Member } from './store.js';
import { WarmPools, type WarmPoolsDeps } from './warm-pools.js';

const v1: PolicyRef = { name: 'default', version: 1, digest: 'sha256:v1' };
const v2: PolicyRef = { name: 'default', version: 2, digest: 'sha256:v2' };
const facts = {} as SandboxFacts;
/** The engine's id of the image `img` names. */
const IMG = 'sha256:img1';

function world(
  options: { latest?: PolicyRef; lockHeld?: boolean; startsPerRound?: number; min?: number; slotsSpare?: () => boolean } = {},
) {
  let clock = 1_000_000;
  const members = new Map<string, Member>();
  const ready = new Map<string, string[]>();
  const claimed = new Map<string, number>();
  const claimedAt = new Map<string, number>();
  const running = new Set<string>();
  const launched: string[] = [];
  const discarded: string[] = [];
  const sizes: Array<[string, { starting: number; ready: number }]> = [];
  const store: WarmPoolsDeps['store'] = {
    pop: async (pool, atMs) => {
      const id = ready.get(pool)?.shift();
      if (id === undefined) return null;
      const member = members.get(id)!;
      members.delete(id);
      claimed.set(id, atMs);
      return member;
    },
    markClaimed: async (pool, atMs) => void claimedAt.set(pool, atMs),
    lastClaimedAt: async (pool) => claimedAt.get(pool) ?? 0,
    settle: async (...ids) => ids.forEach((id) => claimed.delete(id)),
    claims: async () => new Map(claimed),
    owns: async (id) => members.has(id) || claimed.has(id),
    membersOf: async (pool) => new Map([...members].filter(([, m]) => m.pool === pool)),
    putStarting: async (id, m) => void members.set(id, m),
    putReady: async (id, m) => {
      members.set(id, m);
      ready.set(m.pool, [...(ready.get(m.pool) ?? []), id]);
    },
    takeReady: async (pool, id) => {
      const list = ready.get(pool) ?? [];
      if (!list.includes(id)) return false;
      ready.set(
        pool,
        list.filter((x) => x !== id),
      );
      return true;
    },
    forget: async (id) => void members.delete(id),
    holdFiller: async () => options.lockHeld ?? true,
  };
  const pools = new WarmPools(
    {
      store,
      ownership: { owner: 'unit', installation: 'inst_unit' },
      defaultImage: 'img',
      launcher: {
        launchWarm: async (id) => {
          if (options.slotsSpare?.() === false) return null;
          launched.push(id);
          running.add(id);
          return { containerId: `ctr_${id}`, facts, ref: options.latest ?? v1, image: 'img', imageId: IMG };
        },
        discardWarm: async (id) => {
          discarded.push(id);
          running.delete(id);
        },
      },
      runtime: {
        listOwned: async () =>
          [...running].map((leaseId) => ({ leaseId, containerId: `ctr_${leaseId}`, running: true, paused: false, node: 'local' })),
      },
      latestPolicy: async () => options.latest ?? v1,
      log: pino({ level: 'silent' }),
      now: () => clock,
      onSizes: (pool, s) => void sizes.push([pool, s]),
      ...(options.startsPerRound === undefined ? {} : { startsPerRound: options.startsPerRound }),
    },
    [{ policy: 'default', min: options.min ?? 1, max: Math.max(2, options.min ?? 1), idleSeconds: 60 }],
  );
  return { pools, members, claimed, running, launched, discarded, sizes, advance: (ms: number) => (clock += ms) };
}

describe('WarmPools', () => {
  it('a round starts one sandbox while the pool is below its target: min while idle, max once leases claim', async () => {
    const { pools, launched, sizes } = world();
    await pools.maintain();
    await pools.maintain();
    expect(launched).toHaveLength(1);
    expect(sizes.at(-1)).toEqual(['default@img', { starting: 0, ready: 1 }]);
    expect(await pools.claim(v1, 'img', IMG)).toMatchObject({ id: launched[0], containerId: `ctr_${launched[0]}` });
    await pools.maintain();
    await pools.maintain();
    expect(launched).toHaveLength(3);
  });

  it('a round starts up to startsPerRound sandboxes at once, no more than the pool lacks', async () => {
    const { pools, launched, sizes } = world({ startsPerRound: 3, min: 5 });
    await pools.maintain();
    expect(launched).toHaveLength(3);
    await pools.maintain();
    expect(launched).toHaveLength(5);
    await pools.maintain();
    expect(launched).toHaveLength(5);
    expect(sizes.at(-1)).toEqual(['default@img', { starting: 0, ready: 5 }]);
  });

  it('a start that finds no boot slot spare leaves no member behind, and the next round starts it', async () => {
    let spare = false;
    const { pools, members, launched } = world({ slotsSpare: () => spare });
    await pools.maintain();
    expect(launched).toHaveLength(0);
    expect(members.size).toBe(0);
    spare = true;
    await pools.maintain();
    expect(launched).toHaveLength(1);
    expect([...members.values()].map((m) => m.state)).toEqual(['ready']);
  });

  it('a claim takes the oldest ready sandbox once; it stays owned (no orphan) until settled', async () => {
    const { pools, claimed } = world();
    await pools.maintain();
    const warm = await pools.claim(v1, 'img', IMG);
    expect(await pools.claim(v1, 'img', IMG)).toBeUndefined();
    expect(await pools.owns(warm!.id)).toBe(true);
    await pools.settle(warm!.id);
    expect([await pools.owns(warm!.id), claimed.size]).toEqual([false, 0]);
  });

  it('no pool for the policy or image: no claim, the lease starts cold', async () => {
    const { pools } = world();
    await pools.maintain();
    expect(await pools.claim({ ...v1, name: 'other' }, 'img', IMG)).toBeUndefined();
    expect(await pools.claim(v1, 'other-image', IMG)).toBeUndefined();
  });

  it('a ready sandbox of an older policy version is discarded, by a claim and by a round', async () => {
    const a = world();
    await a.pools.maintain();
    expect(await a.pools.claim(v2, 'img', IMG)).toBeUndefined();
    expect(a.discarded).toEqual(a.launched);
    const b = world({ latest: v1 });
    await b.pools.maintain();
    (b.pools as unknown as { deps: WarmPoolsDeps }).deps.latestPolicy = async () => v2;
    await b.pools.maintain();
    expect(b.discarded).toEqual([b.launched[0]]);
  });

  it('a ready sandbox of the image its name named before (a tag moved since) is discarded by a claim', async () => {
    const { pools, launched, discarded } = world();
    await pools.maintain();
    expect(await pools.claim(v1, 'img', 'sha256:img2')).toBeUndefined();
    expect(discarded).toEqual(launched);
  });

  it('a ready sandbox whose container stopped is replaced', async () => {
    const { pools, running, launched, discarded, members } = world();
    await pools.maintain();
    running.clear();
    await pools.maintain();
    expect(discarded).toEqual([launched[0]]);
    expect(members.has(launched[0]!)).toBe(false);
  });

  it('past the target the pool shrinks by one ready sandbox a round; claims left unsettled for a minute are dropped', async () => {
    const w = world();
    await w.pools.maintain();
    await w.pools.claim(v1, 'img', IMG);
    await w.pools.maintain();
    await w.pools.maintain();
    w.advance(61_000);
    await w.pools.maintain();
    expect(w.claimed.size).toBe(0);
    expect(w.discarded).toHaveLength(1);
  });

  it('a process without the filler lock leaves the pool alone', async () => {
    const { pools, launched } = world({ lockHeld: false });
    await pools.maintain();
    expect(launched).toEqual([]);
  });
});
