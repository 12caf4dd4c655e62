import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { ChangeEntry } from '../../contract/watch.js';
import { WatchService, checkCursor, inScope } from './service.js';
import type { LogRead } from './store.js';

const at = '2026-01-01T00:00:00.000Z';
const change = (seq: number, path: string, oldPath?: string): ChangeEntry => ({
  seq,
  type: oldPath ? 'renamed' : 'created',
  path,
  ...(oldPath ? { oldPath } : {}),
  kind: 'file',
  sizeBytes: 1,
  at,
});

describe('inScope', () => {
  it('recursive: the path and everything under it, not its name-prefixed siblings', () => {
    const scope = { path: '/workspace/src', recursive: true };
    expect(inScope(change(1, '/workspace/src'), scope)).toBe(true);
    expect(inScope(change(1, '/workspace/src/a/b.ts'), scope)).toBe(true);
    expect(inScope(change(1, '/workspace/srcx/b.ts'), scope)).toBe(false);
  });

  it('not recursive: the path and its direct children; a rename counts when either path does; overflows always', () => {
    const scope = { path: '/workspace', recursive: false };
    expect(inScope(change(1, '/workspace/a'), scope)).toBe(true);
    expect(inScope(change(1, '/workspace/d/a'), scope)).toBe(false);
    expect(inScope(change(1, '/tmp/x', '/workspace/a'), scope)).toBe(true);
    expect(inScope({ seq: 2, type: 'watch.overflow', reason: 'kernel_queue', at }, scope)).toBe(true);
  });
});

describe('checkCursor', () => {
  it('continues from a cursor the log still covers, and refuses one it lost or never had', () => {
    expect(() => checkCursor(9, { oldestSeq: 10, lastSeq: 20 })).not.toThrow();
    expect(() => checkCursor(20, { oldestSeq: 10, lastSeq: 20 })).not.toThrow();
    expect(() => checkCursor(0, { oldestSeq: null, lastSeq: 0 })).not.toThrow();
    for (const since of [8, 21]) {
      let err: unknown;
      try {
        checkCursor(since, { oldestSeq: 10, lastSeq: 20 });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(AppError);
      expect((err as AppError).code).toBe('watch.resync_required');
      expect((err as AppError).details).toMatchObject({ since, oldestSeq: 10, cursor: 20 });
    }
  });
});

describe('WatchService', () => {
  const log = (entries: ChangeEntry[], oldestSeq: number, lastSeq: number) => ({
    read: async (_id: string, after: number, count: number): Promise<LogRead> => ({
      entries: entries.filter((e) => e.seq > after).slice(0, count),
      oldestSeq,
      lastSeq,
    }),
  });

  it('scope: lexical check, then the path resolved in the sandbox is checked again', async () => {
    const links: Record<string, string> = { '/workspace/link': '/etc', '/workspace/inner': '/workspace/src' };
    const service = new WatchService({ log: log([], 1, 0), paths: { realpath: async (_id, p) => links[p] ?? p } });
    const roots = ['/workspace', '/tmp'];
    await expect(service.scope('l', '/workspace/inner/', true, roots)).resolves.toEqual({ path: '/workspace/src', recursive: true });
    for (const path of ['/etc', '/workspace/../etc', '/workspace/link', 'workspace']) {
      await expect(service.scope('l', path, true, roots)).rejects.toMatchObject({ code: 'input.path_outside_workspace' });
    }
  });

  it('changes: filtered by scope, the cursor is the last seq looked at, more when the page was cut', async () => {
    const entries = [change(1, '/workspace/a'), change(2, '/tmp/b'), change(3, '/workspace/c')];
    const service = new WatchService({ log: log(entries, 1, 3), paths: { realpath: async (_id, p) => p } });
    expect(await service.changes('l', undefined, { path: '/', recursive: true }, 10)).toEqual({ changes: [], cursor: 3, more: false });
    const page = await service.changes('l', 0, { path: '/workspace', recursive: true }, 2);
    expect(page.changes.map((e) => e.seq)).toEqual([1]);
    expect(page).toMatchObject({ cursor: 2, more: true });
  });
});
