/**
 * Lease from a snapshot: `POST /v1/sandboxes {snapshot}` of a snapshot of a sandbox of the
 * default image with a small /workspace, until `ready`, against a cold `POST /v1/sandboxes` of
 * the same image (policy default, no pool). Ours and the baseline alternate, so load from
 * elsewhere falls on both; one warm-up of each is not counted; releases happen outside the
 * timings, all together at the end. Runs: `SBX_BENCH_LEASES`.
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import { againstColdLeases } from '../fleet.js';
import type { Figure } from '../schema.js';

export async function leaseFromSnapshot(ctx: BenchContext): Promise<Figure> {
  const parent = await ctx.lease();
  await ctx.call(parent, 'exec', { cmd: 'mkdir -p /workspace/src && seq 1 20000 > /workspace/src/data.txt' });
  const snap = await ctx.client.snapshotSandbox(parent);
  await ctx.release(parent);
  let sides: { ours: number[]; base: number[] };
  try {
    sides = await againstColdLeases(ctx, async () => {
      const lease = await ctx.client.createSandbox({ snapshot: snap.id });
      if (lease.status !== 'ready') {
        ctx.deferRelease(lease.id);
        throw new Error(`lease ${lease.id} is ${lease.status}, not ready`);
      }
      return lease.id;
    });
  } finally {
    await ctx.client.deleteSnapshot(snap.id).catch(() => undefined);
  }
  const { ours, base } = sides;
  return figure({
    id: 'lease-from-snapshot',
    title: 'lease from a snapshot vs a cold lease of the same image',
    ours: side('POST /v1/sandboxes {snapshot} → ready', ours),
    baseline: side('POST /v1/sandboxes → ready (same image, policy default)', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≤ 1.5 × a cold lease (speed-up ≥ 0.67×)', s ?? NaN, '>=', 1 / 1.5, times)],
    notes: ["a lease from a snapshot also fills each writable root from the snapshot's archive of it"],
  });
}
