/**
 * File write + read: N files (default 1,000) of B bytes (default 4 KiB of text), each written
 * with `write_file` and read back with `read_file` (content compared), against dockerode
 * putArchive of a one-file tar + getArchive of the same path (content compared) in the same
 * container. One sample = one file's write + read; the rate is files per second. The baseline
 * runs after every k-th of our files (`SBX_BENCH_FILES_BASELINE` of them, default 250, spread
 * evenly over the run, so load from elsewhere still falls on both): at 78 ms a file against our
 * 15, running it for all 1,000 cost a minute and a half and sharpened nothing but its own rate.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk, firstFileOf, tarOf } from '../baseline.js';
import { figure, rateOf, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { spreadPicks, timeMs } from '../stats.js';

/** `bytes` of printable text in 64-byte lines, different for every `seed`. */
function textOf(bytes: number, seed: number): string {
  const line = `${String(seed).padStart(8, '0')} ${'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU'.slice(0, 54)}\n`;
  return line.repeat(Math.ceil(bytes / line.length)).slice(0, bytes);
}

export async function filesReadWrite(ctx: BenchContext): Promise<Figure> {
  const { count, bytes, baseline } = ctx.settings.files;
  const withBaseline = spreadPicks(count, baseline);
  const id = await ctx.lease();
  const container = ctx.container(id);
  const ours: number[] = [];
  const base: number[] = [];
  try {
    await dockerExecOk(ctx.docker, container, ['mkdir', '-p', '/workspace/ours', '/workspace/base']);
    for (let i = -3; i < count; i += 1) {
      const content = textOf(bytes, i + 3);
      const path = `/workspace/ours/f${i + 3}.txt`;
      const t = await timeMs(async () => {
        await ctx.call(id, 'write_file', { path, content }, 30);
        const read = await ctx.call(id, 'read_file', { path }, 30);
        if ((read.data as { content?: string } | null)?.content !== content) throw new Error(`read_file ${path} returned other content`);
      });
      if (i >= 0 && !withBaseline[i]) {
        ours.push(t);
        continue;
      }
      const b = await timeMs(async () => {
        const name = `f${i + 3}.txt`;
        await ctx.docker.getContainer(container).putArchive(await tarOf([[name, Buffer.from(content)]]), { path: '/workspace/base' });
        const archive = await ctx.docker.getContainer(container).getArchive({ path: `/workspace/base/${name}` });
        if ((await firstFileOf(archive)).toString() !== content) throw new Error(`getArchive ${name} returned other content`);
      });
      if (i < 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    await ctx.release(id);
  }
  return figure({
    id: 'files-rw',
    title: `file write + read, ${count} × ${bytes} B`,
    ours: side('write_file + read_file ?wait (per file)', ours, { rate: rateOf(1, ours, 'files/s') }),
    baseline: side(`dockerode putArchive + getArchive (per file; ${base.length} of the files)`, base, { rate: rateOf(1, base, 'files/s') }),
    basis: 'rate',
    targets: (s) => [target('≥ 3× baseline', s ?? NaN, '>=', 3, times)],
    notes: [
      'write_file is atomic and durable (temp file, fsync, rename, fsync of the directory) and answers with hashes and a diff; putArchive does none of that',
    ],
  });
}
