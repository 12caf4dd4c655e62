/**
 * The tree `upload` sends and `download` fetches back: `bytes` of random data in files of 1 MiB
 * or less spread over ten directories, packed once into one tar (bench/baseline.ts `tarOf`, owned
 * by uid 1000 like the tool user's files) that both figures and both sides use.
 */
import { randomBytes } from 'node:crypto';
import { tarOf } from './baseline.js';
import { figure, rateOf, side, target, times } from './figure.js';
import type { Figure } from './schema.js';
import { MiB } from './stats.js';

export interface Tree {
  tar: Buffer;
  /** Regular files in it. */
  files: number;
  /** Bytes of file content in it (the tar is a little larger: headers, padding). */
  contentBytes: number;
}

/** A tree of `bytes` of random files: `tree/d<i % 10>/f<i>.bin`, each 1 MiB but the last. */
export async function treeOf(bytes: number): Promise<Tree> {
  const files: Array<[string, Buffer]> = [];
  for (let left = bytes, i = 0; left > 0; i += 1) {
    const size = Math.min(MiB, left);
    files.push([`tree/d${i % 10}/f${i}.bin`, randomBytes(size)]);
    left -= size;
  }
  return { tar: await tarOf(files), files: files.length, contentBytes: bytes };
}

/**
 * The figure of moving `tree` one way (`upload`, `download`): each side's samples (ms a run) as
 * MB/s of the tree's tar, the same unit both ways; target ≥ 0.8× the baseline's rate (issue 14).
 */
export function transferFigure(
  id: 'upload' | 'download',
  tree: Tree,
  ours: { what: string; samplesMs: number[] },
  baseline: { what: string; samplesMs: number[] },
): Figure {
  const mb = tree.tar.length / 1e6;
  return figure({
    id,
    title: `${id} a ${Math.round(tree.contentBytes / 1e6)} MB tree (${tree.files} files)`,
    ours: side(ours.what, ours.samplesMs, { rate: rateOf(mb, ours.samplesMs, 'MB/s') }),
    baseline: side(baseline.what, baseline.samplesMs, { rate: rateOf(mb, baseline.samplesMs, 'MB/s') }),
    basis: 'rate',
    targets: (s) => [target('≥ 0.8× baseline rate', s ?? NaN, '>=', 0.8, times)],
  });
}
