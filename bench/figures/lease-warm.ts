/**
 * Lease latency from a warm pool: `POST /v1/sandboxes` with policy `bench-warm` (a copy of
 * `default` with a pool the runner configured). Before each lease it waits until the pool
 * holds a ready sandbox (the pool's Redis list), so every sample is a claim + bind, never a cold
 * start in disguise. No baseline: Docker has no pool.
 */
import type { BenchContext } from '../context.js';
import { figure, ms, side, target } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

export const WARM_POLICY = 'bench-warm';

export async function leaseWarm(ctx: BenchContext): Promise<Figure> {
  const redis = ctx.redis();
  const readyKey = `${ctx.plane.config.redisPrefix}pool:${WARM_POLICY}@${ctx.image}:ready`;
  const samples: number[] = [];
  for (let i = 0; i <= ctx.settings.warmLeases; i += 1) {
    const deadline = Date.now() + 120_000;
    while ((await redis.llen(readyKey)) === 0) {
      if (Date.now() > deadline) throw new Error('the warm pool held no ready sandbox within 120 s');
      await new Promise((r) => setTimeout(r, 25));
    }
    let id = '';
    const t = await timeMs(async () => (id = await ctx.lease(WARM_POLICY)));
    await ctx.release(id);
    if (i > 0) samples.push(t);
  }
  const ours = side(`POST /v1/sandboxes → ready (policy ${WARM_POLICY}, pool ready)`, samples);
  return figure({
    id: 'lease-warm',
    title: 'lease latency, warm pool',
    ours,
    targets: () => [target('p50 ≤ 20 ms', ours.stats.p50, '<=', 20, ms), target('p95 ≤ 40 ms', ours.stats.p95, '<=', 40, ms)],
  });
}
