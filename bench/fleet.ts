/**
 * Fleets: many sandboxes leased together, for the burst figures and density. `leaseAtOnce`
 * starts every create at the same moment; `leaseSteadily` keeps a few in flight.
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
