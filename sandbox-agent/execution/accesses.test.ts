import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalPath, resolveAccesses } from './accesses.js';

describe('canonicalPath', () => {
  let root = '';
  beforeAll(async () => {
    root = await realpath(await mkdtemp(join(tmpdir(), 'sbx-accesses-')));
    await mkdir(join(root, 'dir'));
    await writeFile(join(root, 'dir', 'a'), 'x');
    await symlink(join(root, 'dir', 'a'), join(root, 'link'));
    await symlink('dir', join(root, 'dirlink'));
    await symlink('dir/missing', join(root, 'dangling'));
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  it('resolves a symlink to its target', async () => {
    expect(await canonicalPath(join(root, 'link'))).toBe(join(root, 'dir', 'a'));
    expect(await canonicalPath(join(root, 'dirlink', 'a'))).toBe(join(root, 'dir', 'a'));
  });

  it('gives `./a` and `a` one form', async () => {
    expect(await canonicalPath(`${root}/dir/./a`)).toBe(await canonicalPath(`${root}/dir/a`));
  });

  it('resolves a missing file (and missing dirs) under an existing, symlinked dir', async () => {
    expect(await canonicalPath(join(root, 'dirlink', 'new.txt'))).toBe(join(root, 'dir', 'new.txt'));
    expect(await canonicalPath(join(root, 'dirlink', 'x', 'y'))).toBe(join(root, 'dir', 'x', 'y'));
  });

  it('follows a dangling link to where its target would be', async () => {
    expect(await canonicalPath(join(root, 'dangling'))).toBe(join(root, 'dir', 'missing'));
  });

  it('resolveAccesses keeps modes, and falls back to `all` when a path cannot be resolved', async () => {
    expect(await resolveAccesses([{ kind: 'path', path: join(root, 'link'), mode: 'write' }])).toEqual([
      { kind: 'path', path: join(root, 'dir', 'a'), mode: 'write' },
    ]);
    expect(await resolveAccesses([{ kind: 'path', path: join(root, 'dir', 'a', 'under-a-file'), mode: 'read' }])).toEqual([
      { kind: 'all' },
    ]);
  });
});
