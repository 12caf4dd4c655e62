/**
 * Snapshot of a sandbox with B bytes (default 100 MB, `SBX_BENCH_UPLOAD_BYTES`) of random data
 * written into /workspace: `POST /v1/sandboxes/:id/snapshots` against `docker commit` of the same
 * container plus a tar of its /workspace (docker exec `tar -cf - -C /workspace . | wc -c`, so the
 * bytes are read, not skipped as GNU tar does for /dev/null). Rates in MB of the written data
 * per second. Ours and the baseline alternate; one warm-up of each is not counted; the snapshot
 * and the committed image are removed outside the timings. Runs: `SBX_BENCH_UPLOAD_RUNS`.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, rateOf, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

export async function snapshotOf(ctx: BenchContext): Promise<Figure> {
  const { bytes, runs } = ctx.settings.upload;
  const id = await ctx.lease();
  const container = ctx.container(id);
  await ctx.call(id, 'exec', { cmd: `head -c ${bytes} /dev/urandom > /workspace/data.bin` });
  const ours: number[] = [];
  const base: number[] = [];
  try {
    for (let r = -1; r < runs; r += 1) {
      let snapId = '';
      const t = await timeMs(async () => (snapId = (await ctx.client.snapshotSandbox(id)).id));
      await ctx.client.deleteSnapshot(snapId);
      let imageId = '';
      const b = await timeMs(async () => {
        const committed = (await ctx.docker.getContainer(container).commit({ labels: ctx.labels })) as { Id: string };
        imageId = committed.Id;
        await dockerExecOk(ctx.docker, container, ['sh', '-c', 'tar -cf - -C /workspace . | wc -c']);
      });
      await ctx.docker.getImage(imageId).remove({ force: true });
      if (r < 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.release(id);
  }
  const mb = bytes / 1e6;
  return figure({
    id: 'snapshot',
    title: `snapshot of a sandbox with ${Math.round(mb)} MB written into /workspace`,
    ours: side('POST /v1/sandboxes/:id/snapshots', ours, { rate: rateOf(mb, ours, 'MB/s') }),
    baseline: side('docker commit + docker exec tar of /workspace', base, { rate: rateOf(mb, base, 'MB/s') }),
    basis: 'rate',
    targets: (s) => [target('≥ 0.8× baseline rate', s ?? NaN, '>=', 0.8, times)],
    notes: [
      "ours commits the (small) container layer while the host's tar archives every writable root straight from its mount into a kept file, hashed (the snapshot's digest covers it); the baseline commits the same layer and only reads /workspace",
    ],
  });
}
