/**
 * Density: N idle sandboxes (default 100) leased at once (C creates in flight), each then
 * asked to run `exec true` (ready for a first call, not just "ready" in the ledger), then every
 * agent's resident memory (RSS, and PSS: shared pages split between the agents) read from the
 * host, and the control plane's before and after. No
 * baseline. All are released at the end (outside any timing).
 */
import type { BenchContext } from '../context.js';
import { figure, mib, side, target } from '../figure.js';
import type { Figure } from '../schema.js';
import { MiB, mapLimit, summarize, timeMs } from '../stats.js';

export async function density(ctx: BenchContext): Promise<Figure> {
  const { sandboxes, concurrency } = ctx.settings.density;
  const planeBefore = await ctx.planeMemory();
  const ids: string[] = [];
  const latencies: number[] = [];
  const errors: string[] = [];
  try {
    await mapLimit(sandboxes, concurrency, async () => {
      try {
        latencies.push(await timeMs(async () => ids.push(await ctx.lease())));
      } catch (err) {
        errors.push(err instanceof Error ? err.message : String(err));
      }
    });
    const answered = await mapLimit(ids.length, concurrency, (i) =>
      ctx.call(ids[i]!, 'exec', { argv: ['true'] }, 60).then(
        () => true,
        () => false,
      ),
    );
    const ready = answered.filter(Boolean).length;
    const agentMemory = await mapLimit(ids.length, 8, (i) => ctx.agentMemory(ids[i]!));
    const agentRss = agentMemory.map((m) => m.rssBytes / MiB);
    const agentPss = agentMemory.map((m) => m.pssBytes / MiB).filter(Number.isFinite);
    const planeAfter = await ctx.planeMemory();
    const rss = summarize(agentRss);
    const pss = summarize(agentPss);
    return figure({
      id: 'density',
      title: `density, ${sandboxes} idle sandboxes`,
      ours: side(`lease latency with up to ${concurrency} creates in flight`, latencies),
      targets: () => [
        target(`all ${sandboxes} ready and answer a call`, ready, '>=', sandboxes, (v) => `${v} of ${sandboxes}`),
        target('agent RSS p50 ≤ 40 MiB', rss.p50, '<=', 40, mib),
        target('agent PSS p50 ≤ 20 MiB', pss.p50, '<=', 20, mib),
      ],
      extra: [
        { what: 'agent RSS per sandbox', unit: 'MiB', stats: rss },
        { what: 'agent PSS per sandbox (shared pages split)', unit: 'MiB', stats: pss },
        { what: 'control-plane RSS before', unit: 'MiB', stats: summarize([planeBefore.rssBytes / MiB]) },
        { what: `control-plane RSS with ${ids.length} sandboxes`, unit: 'MiB', stats: summarize([planeAfter.rssBytes / MiB]) },
      ],
      notes: errors.length > 0 ? [`${errors.length} creates failed, first: ${errors[0]}`] : [],
    });
  } finally {
    await mapLimit(ids.length, concurrency, (i) => ctx.release(ids[i]!).catch(() => undefined));
  }
}
