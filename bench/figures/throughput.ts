/**
 * Throughput: S sandboxes (default 20) × C concurrent callers each (default 8), every caller
 * looping `exec true` with `?wait` for D seconds (default 10); against the same number of
 * callers looping dockerode exec create+start+inspect of `true` in the same containers for the
 * same time. Rate = calls completed / time until the last one ended; the latencies are per call.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, perSecond, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { closedLoop, mapLimit } from '../stats.js';

export async function throughput(ctx: BenchContext): Promise<Figure> {
  const { sandboxes, concurrency, seconds } = ctx.settings.throughput;
  const ids = await mapLimit(sandboxes, 4, () => ctx.lease());
  const workers = sandboxes * concurrency;
  try {
    // A short warm-up of both paths (connections, JIT), not counted.
    await closedLoop(workers, 500, (w) => ctx.call(ids[w % sandboxes]!, 'exec', { argv: ['true'] }, 60).then(() => undefined));
    const ours = await closedLoop(workers, seconds * 1000, (w) =>
      ctx.call(ids[w % sandboxes]!, 'exec', { argv: ['true'] }, 60).then(() => undefined),
    );
    await closedLoop(workers, 500, (w) => dockerExecOk(ctx.docker, ctx.container(ids[w % sandboxes]!), ['true']).then(() => undefined));
    const base = await closedLoop(workers, seconds * 1000, (w) =>
      dockerExecOk(ctx.docker, ctx.container(ids[w % sandboxes]!), ['true']).then(() => undefined),
    );
    const o = side(`${sandboxes} sandboxes × ${concurrency} callers, exec true ?wait`, ours.latenciesMs, {
      rate: { value: (ours.latenciesMs.length / ours.elapsedMs) * 1000, unit: 'calls/s' },
    });
    const b = side(`${workers} callers, dockerode exec true`, base.latenciesMs, {
      rate: { value: (base.latenciesMs.length / base.elapsedMs) * 1000, unit: 'calls/s' },
    });
    return figure({
      id: 'throughput',
      title: `throughput, ${sandboxes}×${concurrency} exec true, ${seconds} s`,
      ours: o,
      baseline: b,
      basis: 'rate',
      targets: (s) => [
        target('≥ 300 calls/s', o.rate!.value, '>=', 300, perSecond('calls/s')),
        target('≥ 5× baseline', s ?? NaN, '>=', 5, times),
      ],
      notes: [
        'an exec call may touch anything, so one sandbox runs its exec calls one at a time (the scheduler); the 8 callers of a sandbox queue behind each other, docker execs do not',
      ],
    });
  } finally {
    await mapLimit(ids.length, 4, (i) => ctx.release(ids[i]!));
  }
}
