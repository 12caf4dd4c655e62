/**
 * Density: N idle sandboxes (default 100), each asked to run `exec true` (ready for a first
 * call, not just "ready" in the ledger), then every agent's resident memory (RSS, and PSS:
 * shared pages split between the agents) read from the host, and the control plane's before and
 * after. The sandboxes are those `burst-cold` leased just before (N at once) when it ran, topped
 * up here with C creates in flight where creates of the burst failed (so the burst's misses are
 * its own, not density's), else all leased here that way. No baseline. All are released at the
 * end (outside any timing).
 */
import type { BenchContext, Fleet } from '../context.js';
import { figure, mib, side, target } from '../figure.js';
import { leaseSteadily, releaseFleet } from '../fleet.js';
import type { Figure } from '../schema.js';
import { MiB, mapLimit, summarize } from '../stats.js';

export async function density(ctx: BenchContext): Promise<Figure> {
  const { sandboxes, concurrency } = ctx.settings.density;
  const carried = ctx.carried.fleet;
  ctx.carried.fleet = undefined;
  const missing = sandboxes - (carried?.ids.length ?? 0);
  const topUp = missing > 0 ? await leaseSteadily(ctx, missing, concurrency) : undefined;
  const fleet: Fleet = carried
    ? {
        ...carried,
        ids: [...carried.ids, ...(topUp?.ids ?? [])],
        latenciesMs: [...carried.latenciesMs, ...(topUp?.latenciesMs ?? [])],
        errors: topUp?.errors ?? [],
        how: topUp ? `${carried.how} (burst-cold), ${missing} more ${topUp.how}` : `${carried.how} (burst-cold)`,
      }
    : topUp!;
  const n = sandboxes;
  try {
    // Untimed: eight at a time, whatever the creates' concurrency was.
    const answered = await mapLimit(fleet.ids.length, 8, (i) =>
      ctx.call(fleet.ids[i]!, 'exec', { argv: ['true'] }, 60).then(
        () => true,
        () => false,
      ),
    );
    const ready = answered.filter(Boolean).length;
    const agentMemory = await mapLimit(fleet.ids.length, 8, (i) => ctx.agentMemory(fleet.ids[i]!));
    const rss = summarize(agentMemory.map((m) => m.rssBytes / MiB));
    const pss = summarize(agentMemory.map((m) => m.pssBytes / MiB).filter(Number.isFinite));
    const planeAfter = await ctx.planeMemory();
    return figure({
      id: 'density',
      title: `density, ${n} idle sandboxes`,
      ours: side(`lease latency, ${fleet.how}`, fleet.latenciesMs),
      targets: () => [
        target(`all ${n} ready and answer a call`, ready, '>=', n, (v) => `${v} of ${n}`),
        target('agent RSS p50 ≤ 40 MiB', rss.p50, '<=', 40, mib),
        target('agent PSS p50 ≤ 20 MiB', pss.p50, '<=', 20, mib),
      ],
      extra: [
        { what: 'agent RSS per sandbox', unit: 'MiB', stats: rss },
        { what: 'agent PSS per sandbox (shared pages split)', unit: 'MiB', stats: pss },
        { what: 'control-plane RSS before', unit: 'MiB', stats: summarize([fleet.planeRssBeforeBytes / MiB]) },
        { what: `control-plane RSS with ${fleet.ids.length} sandboxes`, unit: 'MiB', stats: summarize([planeAfter.rssBytes / MiB]) },
      ],
      notes: fleet.errors.length > 0 ? [`${fleet.errors.length} creates failed, first: ${fleet.errors[0]}`] : [],
    });
  } finally {
    await releaseFleet(ctx, fleet);
  }
}
