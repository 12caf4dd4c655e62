import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../../test/fixtures/scratch.js';
import { SpoolBudget, StreamSpool } from './spool.js';

describe('StreamSpool', () => {
  it('keeps up to its own cap and marks the rest as cut', async () => {
    const dir = await scratchDir('sbx-spool-');
    const spool = new StreamSpool(dir, 'a', 5, new SpoolBudget(100));
    spool.write(Buffer.from('abc'));
    spool.write(Buffer.from('defg'));
    await spool.close();
    expect(await readFile(spool.path, 'utf8')).toBe('abcde');
    expect(spool.truncated).toBe(true);
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
