/**
 * Bursts: N creates (default 100, `SBX_BENCH_BURST`) started at the same moment, every one of
 * which must end `ready`; p50, p95 and max of the per-create latency (from the common start).
 *
 * - `burst-cold`: `POST /v1/sandboxes` under `default` (no pool) N times at once, against N
 *   dockerode create + start + exec `true` (bench/baseline.ts `createStartReady`) at once, run
 *   first and removed (waited for) before ours start. The sandboxes stay for `density` when it
 *   runs next (it measures and releases them), else they are released here, outside the timing.
 * - `burst-warm`: the same N creates under `bench-burst`, a copy of `default` whose pool (min 0,
 *   max N) the runner configured. The pool starts filling on its first claim (`primeBurstPool`,
 *   which the runner calls once `burst-cold` is done, so the fill overlaps density's untimed
 *   work); the burst starts once N sandboxes are ready in it. No baseline: Docker has no pool.
 */
import type { BenchContext, Fleet } from '../context.js';
import { createStartReady } from '../baseline.js';
import { figure, side, target } from '../figure.js';
import { leaseAtOnce, releaseFleet } from '../fleet.js';
import type { Figure } from '../schema.js';
import { mapLimit, summarize, timeMs } from '../stats.js';

export const BURST_POLICY = 'bench-burst';

/** The burst pool's spec for the runner (`SBX_WARM_POOLS`): empty until claimed, then up to `size`. */
export function burstPool(size: number): { policy: string; min: number; max: number } {
  return { policy: BURST_POLICY, min: 0, max: Math.min(100, size) };
}

/** "all N ready", met when every create succeeded. */
const allReady = (fleet: Fleet, n: number) => target(`all ${n} creates succeed`, fleet.ids.length, '>=', n, (v) => `${v} of ${n}`);

const failureNotes = (fleet: Fleet): string[] =>
  fleet.errors.length > 0 ? [`${fleet.errors.length} creates failed, first: ${fleet.errors[0]}`] : [];

export async function burstCold(ctx: BenchContext): Promise<Figure> {
  const n = ctx.settings.burst;
  const base: number[] = [];
  const baseErrors: string[] = [];
  const containers: string[] = [];
  await Promise.all(
    Array.from({ length: n }, async () => {
      try {
        base.push(await timeMs(async () => containers.push(await createStartReady(ctx.docker, ctx.image, ctx.labels))));
      } catch (err) {
        baseErrors.push(err instanceof Error ? err.message : String(err));
      }
    }),
  );
  await mapLimit(containers.length, 16, (i) => ctx.docker.getContainer(containers[i]!).remove({ force: true, v: true }));
  const fleet = await leaseAtOnce(ctx, n);
  if (ctx.willRun('density')) ctx.carried.fleet = fleet;
  else await releaseFleet(ctx, fleet);
  return figure({
    id: 'burst-cold',
    title: `burst of ${n} cold creates at once`,
    ours: side(`${n} × POST /v1/sandboxes at once → ready (policy default)`, fleet.latenciesMs),
    baseline: side(`${n} × dockerode create+start, exec true answers, at once`, base),
    basis: 'p50',
    targets: () => [allReady(fleet, n)],
    notes: [
      ...failureNotes(fleet),
      ...(baseErrors.length > 0 ? [`${baseErrors.length} baseline creates failed, first: ${baseErrors[0]}`] : []),
    ],
  });
}

/** Ready sandboxes in the burst pool now. */
function readyInPool(ctx: BenchContext): Promise<number> {
  return ctx.redis().llen(`${ctx.plane.config.redisPrefix}pool:${BURST_POLICY}@${ctx.image}:ready`);
}

/**
 * Makes the burst pool start filling: its first claim (a lease under `bench-burst`, cold since
 * the pool is empty, released at once) sets it to grow to its max.
 */
export async function primeBurstPool(ctx: BenchContext): Promise<void> {
  const startMs = performance.now();
  await ctx.release(await ctx.lease(BURST_POLICY));
  ctx.carried.burstPrimedAtMs = startMs;
}

export async function burstWarm(ctx: BenchContext): Promise<Figure> {
  const n = Math.min(100, ctx.settings.burst);
  if (ctx.carried.burstPrimedAtMs === undefined) await primeBurstPool(ctx);
  const primedAtMs = ctx.carried.burstPrimedAtMs!;
  ctx.carried.burstPrimedAtMs = undefined;
  // The pool starts up to SBX_BOOT_CONCURRENCY sandboxes a round: allow 5 s a sandbox, and 2 minutes at least.
  const waitLimitMs = Math.max(120_000, n * 5_000);
  for (let ready = await readyInPool(ctx); ready < n; ready = await readyInPool(ctx)) {
    if (performance.now() - primedAtMs > waitLimitMs)
      throw new Error(`the burst pool held ${ready} of ${n} ready sandboxes ${waitLimitMs / 1000} s after its first claim`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const fillMs = performance.now() - primedAtMs;
  const fleet = await leaseAtOnce(ctx, n, BURST_POLICY);
  const left = await readyInPool(ctx);
  await releaseFleet(ctx, fleet);
  return figure({
    id: 'burst-warm',
    title: `burst of ${n} warm creates at once (pool of ${n})`,
    ours: side(`${n} × POST /v1/sandboxes at once → ready (policy ${BURST_POLICY}, pool full)`, fleet.latenciesMs),
    targets: () => [allReady(fleet, n)],
    extra: [{ what: `pool filled to ${n} ready (from its first claim)`, unit: 'ms', stats: summarize([fillMs]) }],
    notes: [
      ...failureNotes(fleet),
      `${left} ready in the pool right after the burst (it refills up to SBX_BOOT_CONCURRENCY sandboxes a round)`,
    ],
  });
}
