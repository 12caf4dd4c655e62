/**
 * Tool-call round trip: `exec true` through `POST /v1/sandboxes/:id/calls?wait=30` (API → call
 * queue → agent → return stream → ledger → the held request), one at a time, against dockerode
 * exec create + start (attached until the stream ends) + inspect in the same container as the
 * same user, and against the physical floor (figures/floor.ts: host fork+exec of `true` plus a
 * Redis PING), sampled between the two. All three alternate; five warm-ups of each are not
 * counted. The floor samples go on to the `floor` row.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, ms, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { summarize, timeMs } from '../stats.js';
import { floorOf, floorSample } from './floor.js';

export async function execRoundTrip(ctx: BenchContext): Promise<Figure> {
  const id = await ctx.lease();
  const container = ctx.container(id);
  const ours: number[] = [];
  const base: number[] = [];
  const floor = { forkMs: [] as number[], pingMs: [] as number[] };
  try {
    for (let i = -5; i < ctx.settings.calls; i += 1) {
      const t = await timeMs(() => ctx.call(id, 'exec', { argv: ['true'] }, 30));
      const b = await timeMs(() => dockerExecOk(ctx.docker, container, ['true']));
      const f = await floorSample(ctx.redis());
      if (i < 0) continue;
      ours.push(t);
      base.push(b);
      floor.forkMs.push(f.forkMs);
      floor.pingMs.push(f.pingMs);
    }
  } finally {
    await ctx.release(id);
  }
  if (ctx.willRun('floor')) ctx.carried.floor = floor;
  const o = side('POST .../calls?wait exec true', ours);
  const floorP50 = summarize(floorOf(floor)).p50;
  const baselineP50 = summarize(base).p50;
  return figure({
    id: 'exec-rtt',
    title: 'tool-call round trip, exec true',
    ours: o,
    baseline: side('dockerode exec create+start+inspect true', base),
    basis: 'p50',
    targets: (s) => [
      target('p50 ≥ 10× faster than baseline', s ?? NaN, '>=', 10, times),
      target(`p50 within 3× of the floor (fork+exec true + PING, p50 ${ms(floorP50)})`, o.stats.p50 / floorP50, '<=', 3, times),
    ],
    // Whether ×10 is within physical reach here: a tenth of the baseline against the floor of any call.
    notes: [
      `a tenth of the baseline's p50 is ${ms(baselineP50 / 10)}; the floor of a call (fork+exec true + PING) is ${ms(floorP50)}: ×10 ${
        baselineP50 / 10 < floorP50 ? 'is below the floor, out of reach on this machine' : 'is above the floor'
      }`,
    ],
  });
}
