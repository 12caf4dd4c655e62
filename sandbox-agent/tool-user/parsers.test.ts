import { describe, expect, it } from 'vitest';
import { decodeText, splitLines } from './file-ops.js';
import { parsePorcelainV2 } from './process-ops.js';

describe('text handling', () => {
  it('decodes UTF-8 keeping a BOM; NUL bytes or invalid sequences mean binary', () => {
    expect(decodeText(Buffer.from('\uFEFFhé'))).toBe('\uFEFFhé');
    expect(decodeText(Buffer.from([0x61, 0, 0x62]))).toBeNull();
    expect(decodeText(Buffer.from([0xc3, 0x28]))).toBeNull();
  });

  it('splits lines keeping their own endings, a last line without one included', () => {
    expect(splitLines('a\r\nb\nc')).toEqual(['a\r\n', 'b\n', 'c']);
    expect(splitLines('a\n')).toEqual(['a\n']);
    expect(splitLines('')).toEqual([]);
  });
});

describe('parsePorcelainV2', () => {
  it('reads branch headers, ordinary, renamed, unmerged and untracked records (NUL-separated, paths with spaces)', () => {
    const out = [
      '# branch.oid 1234',
      '# branch.head main',
      '# branch.upstream origin/main',
      '# branch.ab +2 -1',
      '1 M. N... 100644 100644 100644 aaa bbb staged file.txt',
      '1 .M N... 100644 100644 100644 aaa bbb work tree.txt',
      '2 R. N... 100644 100644 100644 aaa bbb R100 new name.txt',
      'old name.txt',
      'u UU N... 100644 100644 100644 100644 aaa bbb ccc both.txt',
      '? fresh file.txt',
      '',
    ].join('\0');
    expect(parsePorcelainV2(out)).toEqual({
      branch: { head: 'main', oid: '1234', upstream: 'origin/main', ahead: 2, behind: 1 },
      staged: [
        { path: 'staged file.txt', status: 'M' },
        { path: 'new name.txt', status: 'R', from: 'old name.txt' },
      ],
      unstaged: [{ path: 'work tree.txt', status: 'M' }],
      untracked: ['fresh file.txt'],
      conflicted: [{ path: 'both.txt', status: 'UU' }],
    });
  });
});
