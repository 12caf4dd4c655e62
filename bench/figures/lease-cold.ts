/**
 * Lease latency, cold: `POST /v1/sandboxes` under `default` (no pool) until the answer says
 * `ready` — container started, agent connected, manifest built — against dockerode create +
 * start of the same image plus exec `true` until a process inside answers. Ours and the
 * baseline alternate, so load from elsewhere falls on both; one warm-up of each is not counted.
 * Releases and removals happen outside the timings. Also each agent's own start (process start
 * → ready), from the `startupMs` of its `agent ready` log line.
 */
import type { BenchContext } from '../context.js';
import { createStartReady } from '../baseline.js';
import { figure, ms, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { mapLimit, summarize, timeMs } from '../stats.js';

/** `startupMs.ready` of the lease's agent (its `agent ready` log line): ms from its process's start; null when it logged none. */
async function agentReadyMs(ctx: BenchContext, leaseId: string): Promise<number | null> {
  const logs = (await ctx.docker.getContainer(ctx.container(leaseId)).logs({ stdout: true, stderr: true })).toString('utf8');
  for (const line of logs.split('\n')) {
    if (!line.includes('"agent ready"')) continue;
    const ready = (JSON.parse(line.slice(line.indexOf('{'))) as { startupMs?: { ready?: number } }).startupMs?.ready;
    return typeof ready === 'number' ? ready : null;
  }
  return null;
}

export async function leaseCold(ctx: BenchContext): Promise<Figure> {
  const ours: number[] = [];
  const base: number[] = [];
  const containers: string[] = [];
  const agentReady: number[] = [];
  try {
    for (let i = 0; i <= ctx.settings.leases; i += 1) {
      let id = '';
      const t = await timeMs(async () => (id = await ctx.lease()));
      const readyMs = await agentReadyMs(ctx, id);
      ctx.deferRelease(id);
      const b = await timeMs(async () => containers.push(await createStartReady(ctx.docker, ctx.image, ctx.labels)));
      if (i === 0) continue;
      ours.push(t);
      base.push(b);
      if (readyMs !== null) agentReady.push(readyMs);
    }
  } finally {
    await ctx.releaseDeferred();
    await mapLimit(containers.length, 8, (i) => ctx.docker.getContainer(containers[i]!).remove({ force: true, v: true }));
  }
  const ready = summarize(agentReady);
  return figure({
    id: 'lease-cold',
    title: 'lease latency, cold',
    ours: side('POST /v1/sandboxes → ready (policy default)', ours),
    baseline: side('dockerode create+start, exec true answers', base),
    basis: 'p50',
    targets: (s) => [
      target('p50 ≤ 1.2 × baseline (speed-up ≥ 0.83×)', s ?? NaN, '>=', 1 / 1.2, times),
      // NaN (missed) when no agent logged its start: an agent from before the line.
      target('agent ready ≤ 50 ms after its process started (p50)', agentReady.length > 0 ? ready.p50 : NaN, '<=', 50, ms),
    ],
    extra: [{ what: 'agent process start → ready (its `agent ready` log line)', unit: 'ms', stats: ready }],
    notes: [
      'the baseline container runs `sleep infinity` with no network; ours also makes volumes, a Redis ACL user and the manifest, under the policy limits',
    ],
  });
}
