/**
 * Throughput: S sandboxes (default 20) × C concurrent callers each (default 8), every caller
 * looping `exec true` with `?wait` for D seconds (default 10); against the same number of
 * callers looping dockerode exec create+start+inspect of `true` in the same containers for the
 * same time. Rate = calls completed / time until the last one ended; the latencies are per call.
 * A note splits the machine's CPU over our window by party (bench/cpu-split.ts). The sandboxes
 * go on to `cp-cpu` when it runs next (it releases them).
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, perSecond, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { closedLoop, mapLimit } from '../stats.js';
import { describeCpuSplit, startCpuSplit } from '../cpu-split.js';

export async function throughput(ctx: BenchContext): Promise<Figure> {
  const { sandboxes, concurrency, seconds } = ctx.settings.throughput;
  const ids = await mapLimit(sandboxes, 8, () => ctx.lease());
  const workers = sandboxes * concurrency;
  let handedOver = false;
  try {
    // A short warm-up of both paths (connections, JIT), not counted.
    await closedLoop(workers, 500, (w) => ctx.call(ids[w % sandboxes]!, 'exec', { argv: ['true'] }, 60).then(() => undefined));
    const endSplit = await startCpuSplit({
      planePid: ctx.plane.pid,
      redisPid: await ctx.redisPid(),
      sandboxPids: await Promise.all(ids.map((id) => ctx.agentPidOf(id))),
    });
    const ours = await closedLoop(workers, seconds * 1000, (w) =>
      ctx.call(ids[w % sandboxes]!, 'exec', { argv: ['true'] }, 60).then(() => undefined),
    );
    const split = await endSplit();
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
    if (ctx.willRun('cp-cpu')) {
      ctx.carried.callers = ids;
      handedOver = true;
    }
    return figure({
      id: 'throughput',
      title: `throughput, ${sandboxes}×${concurrency} exec true, ${seconds} s`,
      ours: o,
      baseline: b,
      basis: 'rate',
      targets: (s) => [
        target('≥ 300 calls/s', o.rate!.value, '>=', 300, perSecond('calls/s')),
        target('≥ 10× baseline', s ?? NaN, '>=', 10, times),
      ],
      notes: [describeCpuSplit(split, ours.latenciesMs.length, { count: 1000, name: '1,000 calls' })],
    });
  } finally {
    if (!handedOver) await mapLimit(ids.length, 8, (i) => ctx.release(ids[i]!));
  }
}
