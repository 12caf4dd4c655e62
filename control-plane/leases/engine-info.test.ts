/**
 * The planner's engine info: read once while fresh; a stale answer serves at once while one new
 * read runs beside it (shared by every caller); past the stale limit callers wait for the new
 * answer; a failed read reaches those waiting for it and is tried again by the next call, the
 * stale answer still serving meanwhile; a read that never answers fails `runtime.unavailable` at
 * its deadline and the next call reads again.
 */
import { describe, expect, it, vi } from 'vitest';
import type { RuntimeInfo } from '../runtime/runtime.js';
import { EngineInfoCache } from './engine-info.js';

/** An engine whose `/info` reads the test answers one by one. */
function engine() {
  const reads: Array<{ resolve: (info: RuntimeInfo) => void; reject: (err: Error) => void }> = [];
  const read = () => new Promise<RuntimeInfo>((resolve, reject) => reads.push({ resolve, reject }));
  return { read, reads };
}

/** Fresh 5 s, stale up to 60 s, a read may take 10 s. */
const TIMING = { freshMs: 5_000, staleMs: 60_000, readTimeoutMs: 10_000 };

const info = (engineVersion: string): RuntimeInfo => ({ engineVersion, ociRuntimes: ['runc'] });

/** A cache over a new engine whose first answer (`v1`, at t = 1 s) was read; `advance` moves its clock. */
async function answered() {
  const e = engine();
  let now = 1_000;
  const cache = new EngineInfoCache(e.read, { ...TIMING, now: () => now });
  const first = cache.get();
  e.reads[0]!.resolve(info('v1'));
  await first;
  return { cache, reads: e.reads, advance: (ms: number) => (now += ms) };
}

/** Lets the cache's continuations run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Whether `p` has settled (after the continuations ran). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  await settle();
  return done;
}

describe('EngineInfoCache', () => {
  it('reads once while the answer is fresh', async () => {
    const e = engine();
    let now = 1_000;
    const cache = new EngineInfoCache(e.read, { ...TIMING, now: () => now });
    const first = cache.get();
    const second = cache.get();
    expect(e.reads).toHaveLength(1);
    e.reads[0]!.resolve(info('v1'));
    expect(await first).toEqual(info('v1'));
    expect(await second).toEqual(info('v1'));
    now += 5_000;
    expect(await cache.get()).toEqual(info('v1'));
    expect(e.reads).toHaveLength(1);
  });

  it('serves a stale answer at once while one new read runs, then the new answer', async () => {
    const { cache, reads, advance } = await answered();
    advance(5_001);
    const stale = cache.get();
    expect(await settled(stale)).toBe(true);
    expect(await stale).toEqual(info('v1'));
    expect(await cache.get()).toEqual(info('v1'));
    expect(reads).toHaveLength(2);
    reads[1]!.resolve(info('v2'));
    await settle();
    expect(await cache.get()).toEqual(info('v2'));
    expect(reads).toHaveLength(2);
  });

  it('makes callers wait for the new answer once the last one is past the stale limit', async () => {
    const { cache, reads, advance } = await answered();
    advance(60_001);
    const late = cache.get();
    expect(await settled(late)).toBe(false);
    reads[1]!.resolve(info('v2'));
    expect(await late).toEqual(info('v2'));
  });

  it('gives a failed read to those waiting for it and reads again at the next call', async () => {
    const e = engine();
    let now = 1_000;
    const cache = new EngineInfoCache(e.read, { ...TIMING, now: () => now });
    const first = cache.get();
    e.reads[0]!.reject(new Error('engine down'));
    await expect(first).rejects.toThrow('engine down');
    const retry = cache.get();
    expect(e.reads).toHaveLength(2);
    e.reads[1]!.resolve(info('v1'));
    expect(await retry).toEqual(info('v1'));
    // A failed refresh keeps the stale answer serving, and the next call tries again.
    now += 5_001;
    expect(await cache.get()).toEqual(info('v1'));
    e.reads[2]!.reject(new Error('engine down'));
    await settle();
    expect(await cache.get()).toEqual(info('v1'));
    expect(e.reads).toHaveLength(4);
  });

  it('fails a read that never answers at its deadline with runtime.unavailable, and reads again at the next call', async () => {
    vi.useFakeTimers();
    try {
      const { cache, reads, advance } = await answered();
      advance(60_001);
      const hung = cache.get();
      const failed = expect(hung).rejects.toMatchObject({ code: 'runtime.unavailable' });
      await vi.advanceTimersByTimeAsync(10_000);
      await failed;
      const next = cache.get();
      expect(reads).toHaveLength(3);
      reads[2]!.resolve(info('v2'));
      expect(await next).toEqual(info('v2'));
    } finally {
      vi.useRealTimers();
    }
  });
});
