import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../../test/fixtures/scratch.js';
import { SPOOL_IN_MEMORY_BYTES, SpoolBudget, StreamSpool } from './spool.js';

describe('StreamSpool', () => {
  it('keeps up to its own cap and marks the rest as cut', async () => {
    const dir = await scratchDir('sbx-spool-');
    const spool = new StreamSpool(dir, 'a', 5, new SpoolBudget(100));
    spool.write(Buffer.from('abc'));
    spool.write(Buffer.from('defg'));
    await spool.close();
    await spool.persist();
    expect(await readFile(spool.path, 'utf8')).toBe('abcde');
    expect(spool.truncated).toBe(true);
    // A cut spool's digest is of what it holds, not of the stream.
    expect(await spool.sha256()).toBe(createHash('sha256').update('abcde').digest('hex'));
  });

  it('makes no file for output that fits in memory unless persisted, and one that outgrows memory holds every byte in order', async () => {
    const dir = await scratchDir('sbx-spool-');
    const small = new StreamSpool(dir, 'small', 1 << 20, new SpoolBudget(1 << 24));
    small.write(Buffer.from('hello'));
    await small.close();
    expect(await readdir(dir)).toEqual([]);
    await small.remove();
    expect(await readdir(dir)).toEqual([]);

    const large = new StreamSpool(dir, 'large', 1 << 20, new SpoolBudget(1 << 24));
    const chunks = Array.from({ length: 5 }, (_, i) => Buffer.alloc(SPOOL_IN_MEMORY_BYTES / 2, 97 + i));
    for (const chunk of chunks) large.write(chunk);
    await large.close();
    await large.persist();
    expect((await readFile(large.path)).equals(Buffer.concat(chunks))).toBe(true);
    await large.remove();
    expect(await readdir(dir)).toEqual([]);
  });

  it('spools of one sandbox share a budget: what one holds the other cannot, until it is removed', async () => {
    const dir = await scratchDir('sbx-spool-');
    const budget = new SpoolBudget(10);
    const first = new StreamSpool(dir, 'first', 100, budget);
    const second = new StreamSpool(dir, 'second', 100, budget);
    first.write(Buffer.alloc(8, 1));
    second.write(Buffer.alloc(8, 2));
    expect(first.bytes).toBe(8);
    expect(second.bytes).toBe(2);
    expect(second.truncated).toBe(true);
    await Promise.all([first.close(), second.close()]);
    await first.remove();
    const third = new StreamSpool(dir, 'third', 100, budget);
    third.write(Buffer.alloc(8, 3));
    expect(third.bytes).toBe(8);
    await third.close();
  });
});
