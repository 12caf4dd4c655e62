/**
 * Upload of a tree: one tar (bench/tree.ts, built once per run, in memory; `download` fetches the
 * same tree back) of B bytes (default 100 MB) in files of up to 1 MiB spread over ten
 * directories, sent with `PUT /v1/sandboxes/:id/files?path=` (checked
 * whole, unpacked by tar in the sandbox as the tool user) against dockerode putArchive of the
 * same tar into an empty directory of the same container. Each run writes a fresh directory;
 * the previous one is removed outside the timing.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import type { Figure } from '../schema.js';
import { alternate, timeMs, type Alternated } from '../stats.js';
import { transferFigure } from '../tree.js';

export async function uploadTree(ctx: BenchContext): Promise<Figure> {
  const { runs } = ctx.settings.upload;
  const tree = await ctx.uploadTree();
  const { tar, files } = tree;
  const id = await ctx.lease();
  const container = ctx.container(id);
  let samples: Alternated;
  try {
    samples = await alternate(
      runs,
      1,
      async (r) => {
        const dir = `/workspace/up${r + 1}`;
        const t = await timeMs(async () => {
          const answer = await ctx.client.uploadTar(id, dir, tar);
          if (answer.entries < files) throw new Error(`upload unpacked ${answer.entries} of ${files} entries`);
        });
        await dockerExecOk(ctx.docker, container, ['rm', '-rf', dir]);
        return t;
      },
      async (r) => {
        const baseDir = `/workspace/base${r + 1}`;
        await dockerExecOk(ctx.docker, container, ['mkdir', '-p', baseDir]);
        const b = await timeMs(() => ctx.docker.getContainer(container).putArchive(tar, { path: baseDir }));
        await dockerExecOk(ctx.docker, container, ['rm', '-rf', baseDir]);
        return b;
      },
    );
  } finally {
    await ctx.release(id);
  }
  return transferFigure(
    'upload',
    tree,
    { what: 'PUT .../files (tar)', samplesMs: samples.ours },
    { what: 'dockerode putArchive, same tar', samplesMs: samples.base },
  );
}
