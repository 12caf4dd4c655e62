/**
 * A shell session's command round trip: `true` in a persistent session (`exec` with `session`
 * through `POST /v1/sandboxes/:id/calls?wait=30`: per-command FIFOs, the status pipe, the
 * session's turn) against a plain `exec` of `true` (a fresh `bash -c`) in the same sandbox, one
 * at a time, alternating; five warm-ups of each are not counted. The speed-up is plain p50 /
 * session p50 (above 1: a session command is the faster).
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { alternate, timeMs, type Alternated } from '../stats.js';

export async function sessionRoundTrip(ctx: BenchContext): Promise<Figure> {
  const id = await ctx.lease();
  const session = (await ctx.client.json('POST', `/v1/sandboxes/${id}/sessions`, {})) as { sessionId: string };
  let samples: Alternated;
  try {
    samples = await alternate(
      ctx.settings.calls,
      5,
      () => timeMs(() => ctx.call(id, 'exec', { cmd: 'true', session: session.sessionId }, 30)),
      () => timeMs(() => ctx.call(id, 'exec', { cmd: 'true' }, 30)),
    );
  } finally {
    await ctx.release(id);
  }
  return figure({
    id: 'session-rtt',
    title: 'session command round trip, true',
    ours: side('exec {session, cmd: true}', samples.ours),
    baseline: side('exec {cmd: true} (fresh bash -c)', samples.base),
    basis: 'p50',
    targets: (s) => [target('p50 ≥ 0.5× of a plain exec (a session command costs at most twice one)', s ?? NaN, '>=', 0.5, times)],
  });
}
