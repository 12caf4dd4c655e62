/**
 * Upload of a tree: one tar (built once, in memory) of B bytes (default 100 MB) in files of up
 * to 1 MiB spread over ten directories, sent with `PUT /v1/sandboxes/:id/files?path=` (checked
 * whole, unpacked by tar in the sandbox as the tool user) against dockerode putArchive of the
 * same tar into an empty directory of the same container. Each run writes a fresh directory;
 * the previous one is removed outside the timing.
 */
import { randomBytes } from 'node:crypto';
import type { BenchContext } from '../context.js';
import { dockerExecOk, tarOf } from '../baseline.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { MiB, timeMs } from '../stats.js';

export async function uploadTree(ctx: BenchContext): Promise<Figure> {
  const { bytes, runs } = ctx.settings.upload;
  const files: Array<[string, Buffer]> = [];
  for (let left = bytes, i = 0; left > 0; i += 1) {
    const size = Math.min(MiB, left);
    files.push([`tree/d${i % 10}/f${i}.bin`, randomBytes(size)]);
    left -= size;
  }
  const tar = await tarOf(files);
  const id = await ctx.lease();
  const container = ctx.container(id);
  const ours: number[] = [];
  const base: number[] = [];
  try {
    for (let r = -1; r < runs; r += 1) {
      const dir = `/workspace/up${r + 1}`;
      const t = await timeMs(async () => {
        const answer = await ctx.client.uploadTar(id, dir, tar);
        if (answer.entries < files.length) throw new Error(`upload unpacked ${answer.entries} of ${files.length} entries`);
      });
      await dockerExecOk(ctx.docker, container, ['rm', '-rf', dir]);
      const baseDir = `/workspace/base${r + 1}`;
      await dockerExecOk(ctx.docker, container, ['mkdir', '-p', baseDir]);
      const b = await timeMs(() => ctx.docker.getContainer(container).putArchive(tar, { path: baseDir }));
      await dockerExecOk(ctx.docker, container, ['rm', '-rf', baseDir]);
      if (r < 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.release(id);
  }
  const mb = tar.length / 1e6;
  const rate = (s: number[]): { value: number; unit: string } => ({
    value: (mb * s.length * 1000) / s.reduce((a, b) => a + b, 0),
    unit: 'MB/s',
  });
  return figure({
    id: 'upload',
    title: `upload a ${Math.round(bytes / 1e6)} MB tree (${files.length} files)`,
    ours: side('PUT .../files (tar)', ours, { rate: rate(ours) }),
    baseline: side('dockerode putArchive, same tar', base, { rate: rate(base) }),
    basis: 'rate',
    targets: (s) => [target('≥ 0.8× baseline rate', s ?? NaN, '>=', 0.8, times)],
  });
}
