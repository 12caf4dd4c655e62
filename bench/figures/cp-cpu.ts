/**
 * Control-plane CPU per call: the control-plane process's user + system CPU time (its
 * /proc/<pid>/stat, bench/procfs.ts) read before and after a fixed number of `exec true` calls
 * (`SBX_BENCH_CPU_CALLS`, default 1,000), one caller per sandbox — the throughput figure's
 * sandboxes when it ran just before, else four of its own — reported as CPU milliseconds per
 * 1,000 calls. The plane's background work (pool rounds, reconcile) is read over a quiet window
 * first and reported beside it. No baseline, no target: the issue asks for the figure.
 */
import type { BenchContext } from '../context.js';
import { figure, side } from '../figure.js';
import type { Figure } from '../schema.js';
import { mapLimit, summarize, timeMs } from '../stats.js';

/** The quiet window over which background CPU is read, ms. */
const QUIET_MS = 2000;

/** CPU ms per 1,000 calls from two readings of a process's CPU time (ms) around `calls` calls. */
export function cpuPerThousand(beforeMs: number, afterMs: number, calls: number): number {
  return ((afterMs - beforeMs) * 1000) / calls;
}

export async function controlPlaneCpu(ctx: BenchContext): Promise<Figure> {
  const calls = ctx.settings.cpuCalls;
  const carried = ctx.carried.callers;
  ctx.carried.callers = undefined;
  const ids = carried ?? (await mapLimit(Math.min(4, ctx.settings.throughput.sandboxes), 4, () => ctx.lease()));
  const latencies: number[] = [];
  try {
    const exec = (id: string): Promise<unknown> => ctx.call(id, 'exec', { argv: ['true'] }, 60);
    // Warm-up (connections, JIT) where throughput did not just run them.
    if (!carried) await mapLimit(ids.length * 5, ids.length, (i) => exec(ids[i % ids.length]!));
    const quietStart = await ctx.planeCpuMs();
    await new Promise((r) => setTimeout(r, QUIET_MS));
    const quietMsPerSecond = ((await ctx.planeCpuMs()) - quietStart) / (QUIET_MS / 1000);
    const before = await ctx.planeCpuMs();
    let next = 0;
    const elapsedMs = await timeMs(() =>
      Promise.all(
        ids.map(async (id) => {
          while (next < calls) {
            next += 1;
            latencies.push(await timeMs(() => exec(id)));
          }
        }),
      ),
    );
    const perThousand = cpuPerThousand(before, await ctx.planeCpuMs(), calls);
    const background = (quietMsPerSecond * elapsedMs) / calls;
    return figure({
      id: 'cp-cpu',
      title: `control-plane CPU per 1,000 calls (${calls} exec true, ${ids.length} callers)`,
      ours: side('control-plane user+system CPU over the calls, per 1,000', [perThousand], {
        unit: 'CPU ms',
        rate: { value: perThousand, unit: 'CPU ms / 1,000 calls' },
      }),
      targets: () => [],
      extra: [
        { what: 'call latency meanwhile', unit: 'ms', stats: summarize(latencies) },
        {
          what: 'of which background work (quiet rate × the time the calls took), per 1,000',
          unit: 'CPU ms',
          stats: summarize([background]),
        },
      ],
      notes: [
        `background CPU in a ${QUIET_MS / 1000} s quiet window before: ${quietMsPerSecond.toFixed(1)} ms/s; /proc counts in clock ticks (10 ms at 100 Hz)`,
      ],
    });
  } finally {
    await mapLimit(ids.length, 8, (i) => ctx.release(ids[i]!));
  }
}
