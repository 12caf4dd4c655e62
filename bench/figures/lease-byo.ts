/**
 * Lease latency, cold, of a bring-your-own image: `POST /v1/sandboxes {image}` of an image with
 * no sbx agent and no Node (the Debian base, `sbx-base:bookworm`) until `ready`, against the same
 * cold lease of the default image. Both get the agent from the runtime mount; the difference is
 * what the image's own probe costs (its programs, its libc). Alternating, one warm-up of each
 * not counted; releases outside the timings, all together at the end.
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import { againstColdLeases } from '../fleet.js';
import type { Figure } from '../schema.js';

/** An image on the engine without an sbx agent or Node: the base setup builds the default image from. */
export const BYO_IMAGE = 'sbx-base:bookworm';

export async function leaseByo(ctx: BenchContext): Promise<Figure> {
  const { ours, base } = await againstColdLeases(ctx, () => ctx.lease(undefined, BYO_IMAGE));
  return figure({
    id: 'lease-byo',
    title: 'lease latency, cold, bring-your-own image',
    ours: side(`POST /v1/sandboxes {image: ${BYO_IMAGE}} → ready`, ours),
    baseline: side('POST /v1/sandboxes (default image) → ready', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≤ 1.2 × the default image (speed-up ≥ 0.83×)', s ?? NaN, '>=', 1 / 1.2, times)],
    notes: ['the image has no agent and no Node: both come from the read-only runtime mount at /opt/sbx'],
  });
}
