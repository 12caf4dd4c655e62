/**
 * Fork of N (issue 12 part 5): `POST /v1/snapshots/:id/fork {count: N}` of a snapshot of a
 * sandbox with a small /workspace, against N cold leases of the default image started at once
 * (`POST /v1/sandboxes` N times concurrently). Per copy: the wall time until all N are ready,
 * divided by N. The snapshot is taken outside the timings. N = min(10, SBX_BENCH_LEASES + 1).
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

export async function forkOfN(ctx: BenchContext): Promise<Figure> {
  const n = Math.max(2, Math.min(10, ctx.settings.leases + 1));
  const parent = await ctx.lease();
  await ctx.call(parent, 'exec', { cmd: 'mkdir -p /workspace/src && seq 1 20000 > /workspace/src/data.txt' });
  const snap = await ctx.client.snapshotSandbox(parent);
  const ours: number[] = [];
  const base: number[] = [];
  try {
    let forked: string[] = [];
    const t = await timeMs(async () => (forked = (await ctx.client.fork(snap.id, { count: n })).map((l) => l.id)));
    forked.forEach((id) => ctx.deferRelease(id));
    await ctx.releaseDeferred();
    ours.push(t / n);
    let cold: string[] = [];
    const b = await timeMs(async () => (cold = await Promise.all(Array.from({ length: n }, () => ctx.lease()))));
    cold.forEach((id) => ctx.deferRelease(id));
    await ctx.releaseDeferred();
    base.push(b / n);
  } finally {
    await ctx.releaseDeferred();
    await ctx.release(parent).catch(() => undefined);
    await ctx.client.deleteSnapshot(snap.id).catch(() => undefined);
  }
  return figure({
    id: 'fork',
    title: `fork of ${n} from a snapshot, per copy`,
    ours: side(`POST /v1/snapshots/:id/fork {count: ${n}} → all ready, ÷ ${n}`, ours),
    baseline: side(`${n} cold POST /v1/sandboxes at once → all ready, ÷ ${n}`, base),
    basis: 'p50',
    targets: (s) => [target('per copy ≤ 1.5 × a cold lease (speed-up ≥ 0.67×)', s ?? NaN, '>=', 1 / 1.5, times)],
    notes: [
      "a fork also copies each writable root from the snapshot's archive of it (tar in the sandbox); a cold lease seeds from the image too",
    ],
  });
}
