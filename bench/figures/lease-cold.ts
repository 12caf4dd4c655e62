/**
 * Lease latency, cold: `POST /v1/sandboxes` under `default` (no pool) until the answer says
 * `ready` — container started, agent connected, manifest built — against dockerode create +
 * start of the same image plus exec `true` until a process inside answers. Ours and the
 * baseline alternate, so load from elsewhere falls on both; one warm-up of each is not counted.
 * Releases and removals happen outside the timings, all together at the end.
 */
import type { BenchContext } from '../context.js';
import { createStartReady } from '../baseline.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { mapLimit, timeMs } from '../stats.js';

export async function leaseCold(ctx: BenchContext): Promise<Figure> {
  const ours: number[] = [];
  const base: number[] = [];
  const containers: string[] = [];
  try {
    for (let i = 0; i <= ctx.settings.leases; i += 1) {
      let id = '';
      const t = await timeMs(async () => (id = await ctx.lease()));
      ctx.deferRelease(id);
      const b = await timeMs(async () => containers.push(await createStartReady(ctx.docker, ctx.image, ctx.labels)));
      if (i === 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.releaseDeferred();
    await mapLimit(containers.length, 8, (i) => ctx.docker.getContainer(containers[i]!).remove({ force: true, v: true }));
  }
  return figure({
    id: 'lease-cold',
    title: 'lease latency, cold',
    ours: side('POST /v1/sandboxes → ready (policy default)', ours),
    baseline: side('dockerode create+start, exec true answers', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≤ 1.2 × baseline (speed-up ≥ 0.83×)', s ?? NaN, '>=', 1 / 1.2, times)],
    notes: [
      'the baseline container runs `sleep infinity` with no network; ours also makes volumes, a Redis ACL user and the manifest, under the policy limits',
    ],
  });
}
