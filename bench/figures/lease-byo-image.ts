/**
 * Cold lease of a bring-your-own image against the default image: an image built through
 * `POST /v1/images` (FROM the default image, one COPY and one RUN layer on top) leased by its id,
 * against cold leases of the default image, alternating so load from elsewhere falls on both;
 * one warm-up of each is not counted. The build is outside the timings; the sandboxes are
 * released together at the end, then the image is deleted.
 */
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import { againstColdLeases } from '../fleet.js';
import type { Figure } from '../schema.js';

/** A tar of `Dockerfile` and `payload.txt` (ustar, one 512-byte header each). */
function contextTar(files: Record<string, string>): Uint8Array {
  const blocks: Buffer[] = [];
  for (const [name, text] of Object.entries(files)) {
    const body = Buffer.from(text);
    const header = Buffer.alloc(512);
    header.write(name, 0);
    header.write('0000644\0', 100);
    header.write('0000000\0', 108);
    header.write('0000000\0', 116);
    header.write(`${body.length.toString(8).padStart(11, '0')}\0`, 124);
    header.write('00000000000\0', 136);
    header.write('        ', 148);
    header.write('0', 156);
    header.write('ustar\0', 257);
    header.write('00', 263);
    let sum = 0;
    for (const byte of header) sum += byte;
    header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    blocks.push(header, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

export async function leaseByoImage(ctx: BenchContext): Promise<Figure> {
  const tar = contextTar({
    Dockerfile: `FROM ${ctx.image}\nCOPY payload.txt /opt/payload.txt\nRUN cp /opt/payload.txt /opt/payload.copy\n`,
    'payload.txt': `bench ${Date.now()}\n`,
  });
  const { image } = await ctx.client.buildImage(tar);
  for await (const event of ctx.client.imageEvents(image.id)) {
    if (event.type === 'failed') throw new Error(`bench image build failed: ${event.error?.message ?? ''}`);
  }
  let sides: { ours: number[]; base: number[] };
  try {
    sides = await againstColdLeases(ctx, async () => (await ctx.client.createSandbox({ image: image.id })).id);
  } finally {
    await ctx.client.deleteImage(image.id).catch(() => undefined);
  }
  const { ours, base } = sides;
  return figure({
    id: 'lease-byo-image',
    title: 'cold lease, built image vs default image',
    ours: side('POST /v1/sandboxes {image: img_…} → ready', ours),
    baseline: side('POST /v1/sandboxes (default image) → ready', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≤ 1.2 × default image (speed-up ≥ 0.83×)', s ?? NaN, '>=', 1 / 1.2, times)],
    notes: ['the built image is FROM the default image (the agent inside it); images without an agent are part 1 of issue 12'],
  });
}
