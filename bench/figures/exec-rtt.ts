/**
 * Tool-call round trip: `exec true` through `POST /v1/sandboxes/:id/calls?wait=30` (API → call
 * queue → agent → returns queue → ledger → the held request), one at a time, against dockerode
 * exec create + start (attached until the stream ends) + inspect in the same container as the
 * same user. Ours and the baseline alternate; five warm-ups of each are not counted.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, ms, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

export async function execRoundTrip(ctx: BenchContext): Promise<Figure> {
  const id = await ctx.lease();
  const container = ctx.container(id);
  const ours: number[] = [];
  const base: number[] = [];
  try {
    for (let i = -5; i < ctx.settings.calls; i += 1) {
      const t = await timeMs(() => ctx.call(id, 'exec', { argv: ['true'] }, 30));
      const b = await timeMs(() => dockerExecOk(ctx.docker, container, ['true']));
      if (i < 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.release(id);
  }
  const o = side('POST .../calls?wait exec true', ours);
  return figure({
    id: 'exec-rtt',
    title: 'tool-call round trip, exec true',
    ours: o,
    baseline: side('dockerode exec create+start+inspect true', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≥ 5× faster than baseline', s ?? NaN, '>=', 5, times), target('p50 ≤ 10 ms', o.stats.p50, '<=', 10, ms)],
  });
}
