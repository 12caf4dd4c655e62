/**
 * Many sandboxes leased in one figure: fleets for the burst figures and density (`leaseAtOnce`
 * starts every create at the same moment; `leaseSteadily` keeps a few in flight), and the
 * alternating comparison of a kind of lease with a cold one (`againstColdLeases`).
 */
import type { BenchContext, Fleet } from './context.js';
import { mapLimit, timeMs } from './stats.js';

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** Leases `count` sandboxes with at most `concurrency` creates in flight; a failed create is counted, not thrown. */
export async function leaseSteadily(ctx: BenchContext, count: number, concurrency: number, policy?: string): Promise<Fleet> {
  const planeRssBeforeBytes = (await ctx.planeMemory()).rssBytes;
  const fleet: Fleet = { ids: [], latenciesMs: [], errors: [], how: `up to ${concurrency} creates in flight`, planeRssBeforeBytes };
  await mapLimit(count, concurrency, async () => {
    try {
      fleet.latenciesMs.push(await timeMs(async () => fleet.ids.push(await ctx.lease(policy))));
    } catch (err) {
      fleet.errors.push(messageOf(err));
    }
  });
  return fleet;
}

/** Leases `count` sandboxes, every create started at once; each latency runs from that common start. */
export function leaseAtOnce(ctx: BenchContext, count: number, policy?: string): Promise<Fleet> {
  return leaseSteadily(ctx, count, count, policy).then((f) => ({ ...f, how: `${count} creates at once` }));
}

/** Releases every sandbox of `fleet`, `concurrency` at a time; failures are ignored (the final sweep removes what is left). */
export async function releaseFleet(ctx: BenchContext, fleet: Fleet, concurrency = 8): Promise<void> {
  await mapLimit(fleet.ids.length, concurrency, (i) => ctx.release(fleet.ids[i]!).catch(() => undefined));
}

/**
 * Alternates one create of ours (`create`, resolving to the new lease's id) with one cold lease
 * of the default image, `SBX_BENCH_LEASES` + 1 times, so load from elsewhere falls on both; the
 * first of each is a warm-up, not counted. Every sandbox is released together at the end
 * (`deferRelease`), also when a create throws. Returns both sides' latencies, ms.
 */
export async function againstColdLeases(ctx: BenchContext, create: () => Promise<string>): Promise<{ ours: number[]; base: number[] }> {
  const ours: number[] = [];
  const base: number[] = [];
  try {
    for (let i = 0; i <= ctx.settings.leases; i += 1) {
      let id = '';
      const t = await timeMs(async () => (id = await create()));
      ctx.deferRelease(id);
      const b = await timeMs(async () => (id = await ctx.lease()));
      ctx.deferRelease(id);
      if (i === 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.releaseDeferred();
  }
  return { ours, base };
}
