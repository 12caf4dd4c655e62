/**
 * File write + read: N files (default 1,000) of B bytes (default 4 KiB of text), each written
 * with `write_file` and read back with `read_file` (content compared), against dockerode
 * putArchive of a one-file tar + getArchive of the same path (content compared) in the same
 * container. One sample = one file's write + read; the rate is files per second. Ours and the
 * baseline alternate file by file.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk, firstFileOf, tarOf } from '../baseline.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

/** `bytes` of printable text in 64-byte lines, different for every `seed`. */
function textOf(bytes: number, seed: number): string {
  const line = `${String(seed).padStart(8, '0')} ${'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU'.slice(0, 54)}\n`;
  return line.repeat(Math.ceil(bytes / line.length)).slice(0, bytes);
}

export async function filesReadWrite(ctx: BenchContext): Promise<Figure> {
  const { count, bytes } = ctx.settings.files;
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
  const rate = (s: number[]): { value: number; unit: string } => ({
    value: (s.length * 1000) / s.reduce((a, b) => a + b, 0),
    unit: 'files/s',
  });
  return figure({
    id: 'files-rw',
    title: `file write + read, ${count} × ${bytes} B`,
    ours: side('write_file + read_file ?wait (per file)', ours, { rate: rate(ours) }),
    baseline: side('dockerode putArchive + getArchive (per file)', base, { rate: rate(base) }),
    basis: 'rate',
    targets: (s) => [target('≥ 3× baseline', s ?? NaN, '>=', 3, times)],
    notes: [
      'write_file is atomic and durable (temp file, fsync, rename, fsync of the directory) and answers with hashes and a diff; putArchive does none of that',
    ],
  });
}
