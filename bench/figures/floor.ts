/**
 * The physical floor of a tool call: what no implementation can go below on this machine — one
 * host `fork+exec` of `true` (spawnSync, waited for) plus one Redis `PING` round trip on the
 * control plane's own Redis connection settings. exec-rtt takes one floor sample between each of
 * its calls (so load from elsewhere falls on both) and compares its p50 with the floor's; this
 * row reports those samples, or takes its own when exec-rtt does not run. No baseline.
 */
import { spawnSync } from 'node:child_process';
import type { Redis } from '../../control-plane/redis/connections.js';
import type { BenchContext } from '../context.js';
import { figure, side } from '../figure.js';
import type { Figure } from '../schema.js';
import { summarize, timeMs } from '../stats.js';

/** One floor sample: a host fork+exec of `true` and a Redis PING, each in ms. */
export async function floorSample(redis: Redis): Promise<{ forkMs: number; pingMs: number }> {
  const start = performance.now();
  const child = spawnSync('true', { stdio: 'ignore' });
  const forkMs = performance.now() - start;
  if (child.status !== 0) throw new Error(`true exited ${child.status}: ${child.error?.message ?? ''}`);
  const pingMs = await timeMs(() => redis.ping());
  return { forkMs, pingMs };
}

/** Per sample, fork+exec plus PING (ms): the floor of one call. */
export function floorOf(samples: { forkMs: readonly number[]; pingMs: readonly number[] }): number[] {
  return samples.forkMs.map((f, i) => f + (samples.pingMs[i] ?? NaN));
}

export async function floor(ctx: BenchContext): Promise<Figure> {
  let samples = ctx.carried.floor;
  ctx.carried.floor = undefined;
  const interleaved = samples !== undefined;
  if (!samples) {
    samples = { forkMs: [], pingMs: [] };
    for (let i = -5; i < ctx.settings.calls; i += 1) {
      const s = await floorSample(ctx.redis());
      if (i < 0) continue;
      samples.forkMs.push(s.forkMs);
      samples.pingMs.push(s.pingMs);
    }
  }
  return figure({
    id: 'floor',
    title: 'physical floor of a call: fork+exec true + Redis PING',
    ours: side('host spawnSync true + PING, per sample', floorOf(samples)),
    targets: () => [],
    extra: [
      { what: 'host fork+exec true (spawnSync)', unit: 'ms', stats: summarize(samples.forkMs) },
      { what: 'Redis PING round trip', unit: 'ms', stats: summarize(samples.pingMs) },
    ],
    notes: [
      interleaved
        ? 'sampled between the exec-rtt calls, so both saw the same load; exec-rtt compares its p50 with this p50'
        : 'sampled on its own (exec-rtt did not run)',
    ],
  });
}
