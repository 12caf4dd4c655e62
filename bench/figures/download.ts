/**
 * Download of a tree: the tree `upload` sends (bench/tree.ts, the same tar), put into a sandbox
 * once outside the timings (putArchive, owned by the tool user as the tar says), fetched back whole with `GET /v1/sandboxes/:id/files?path=` (tar
 * made by tar in the sandbox as the tool user) against dockerode getArchive of the same
 * directory of the same container. Both sides read the stream to its end and count its bytes;
 * the rates are the tree's tar size per second, so the two are in the same unit. Ours and the
 * baseline alternate; one warm-up of each is not counted.
 */
import type { Readable } from 'node:stream';
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import type { Figure } from '../schema.js';
import { alternate, timeMs, type Alternated } from '../stats.js';
import { transferFigure } from '../tree.js';

const DIR = '/workspace/dl';

/** Bytes of a stream read to its end. */
async function drain(stream: AsyncIterable<Uint8Array>): Promise<number> {
  let bytes = 0;
  for await (const chunk of stream) bytes += chunk.length;
  return bytes;
}

export async function downloadTree(ctx: BenchContext): Promise<Figure> {
  const { runs } = ctx.settings.upload;
  const tree = await ctx.uploadTree();
  const { tar, contentBytes } = tree;
  const id = await ctx.lease();
  const container = ctx.docker.getContainer(ctx.container(id));
  let samples: Alternated;
  try {
    await dockerExecOk(ctx.docker, ctx.container(id), ['mkdir', '-p', DIR]);
    await container.putArchive(tar, { path: DIR });
    samples = await alternate(
      runs,
      1,
      () =>
        timeMs(async () => {
          const response = await ctx.client.raw('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(DIR)}`);
          if (!response.ok || !response.body) throw new Error(`download: HTTP ${response.status}`);
          const got = await drain(response.body as unknown as AsyncIterable<Uint8Array>);
          if (got < contentBytes) throw new Error(`download gave ${got} bytes, less than the ${contentBytes} of the tree`);
        }),
      () =>
        timeMs(async () => {
          const got = await drain((await container.getArchive({ path: DIR })) as Readable);
          if (got < contentBytes) throw new Error(`getArchive gave ${got} bytes, less than the ${contentBytes} of the tree`);
        }),
    );
  } finally {
    await ctx.release(id);
  }
  return transferFigure(
    'download',
    tree,
    { what: 'GET .../files (tar)', samplesMs: samples.ours },
    { what: 'dockerode getArchive, same directory', samplesMs: samples.base },
  );
}
