/**
 * Pause/resume round trip: `POST /v1/sandboxes/:id/pause` then `POST .../resume` (each answers
 * once the lease record changed and the engine froze or thawed the container, audited), against
 * dockerode `pause` + `unpause` of the same container. Ours and the baseline alternate; three
 * warm-ups of each are not counted. After each of ours, an `exec true` proves the agent answers
 * again (not timed).
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { alternate, timeMs, type Alternated } from '../stats.js';

export async function pauseResume(ctx: BenchContext): Promise<Figure> {
  const id = await ctx.lease();
  const container = ctx.docker.getContainer(ctx.container(id));
  const rounds = Math.max(3, Math.round(ctx.settings.calls / 5));
  let samples: Alternated;
  try {
    samples = await alternate(
      rounds,
      3,
      async () => {
        const t = await timeMs(async () => {
          await ctx.client.pauseSandbox(id);
          await ctx.client.resumeSandbox(id);
        });
        await ctx.call(id, 'exec', { argv: ['true'] }, 30);
        return t;
      },
      () =>
        timeMs(async () => {
          await container.pause();
          await container.unpause();
        }),
    );
  } finally {
    await ctx.release(id);
  }
  return figure({
    id: 'pause-resume',
    title: 'pause + resume round trip',
    ours: side('POST .../pause + POST .../resume', samples.ours),
    baseline: side('dockerode pause + unpause', samples.base),
    basis: 'p50',
    // The issue names the row without a target; the API's work over the engine's (two lease
    // compare-and-swaps, two timer moves, two audit entries) should stay within 3× of it.
    targets: (s) => [target('p50 within 3× of docker pause+unpause', s ?? NaN, '>=', 1 / 3, times)],
  });
}
