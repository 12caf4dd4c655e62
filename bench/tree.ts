/**
 * The tree `upload` sends and `download` fetches back: `bytes` of random data in files of 1 MiB
 * or less spread over ten directories, packed once into one tar (bench/baseline.ts `tarOf`, owned
 * by uid 1000 like the tool user's files) that both figures and both sides use.
 */
import { randomBytes } from 'node:crypto';
import { tarOf } from './baseline.js';
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
