import { createWriteStream } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { join } from 'node:path';
import * as tar from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { scratchDir } from '../../test/fixtures/scratch.js';
import { tarBytes, type FixtureEntry } from '../../test/fixtures/tar.js';
import { guardArchive, guardStream, unsafeReason } from './tar-guard.js';

const owner = { uid: 1000, gid: 1000, uname: 'sandbox', gname: 'sandbox' };

async function tarFile(entries: FixtureEntry[]): Promise<string> {
  const file = join(await scratchDir('sbx-tar-'), 'in.tar');
  await writeFile(file, await tarBytes(entries));
  return file;
}

async function readEntries(file: string): Promise<tar.Header[]> {
  const extract = tar.extract();
  const headers: tar.Header[] = [];
  extract.on('entry', (h, s, next) => {
    headers.push(h);
    s.on('end', next);
    s.resume();
  });
  extract.end(await readFile(file));
  await new Promise<void>((r) => extract.on('finish', () => r()));
  return headers;
}

describe('unsafeReason', () => {
  it.each([
    ['file', 'a/b.txt', undefined, null],
    ['file', 'a/..b/c', undefined, null],
    ['file', '../x', undefined, 'name contains ".."'],
    ['file', 'a/../../x', undefined, 'name contains ".."'],
    ['file', '/abs', undefined, 'absolute name'],
    ['symlink', 'a/b/l', '../c', null],
    ['symlink', 'a/l', '../../c', 'outside'],
    ['symlink', 'l', '/etc/passwd', 'absolute'],
    ['link', 'h', 'a/b', null],
    ['link', 'h', '../x', 'outside'],
    ['character-device', 'd', undefined, 'not allowed'],
    ['fifo', 'f', undefined, 'not allowed'],
    ['file', '.', undefined, 'root must be a directory'],
    ['directory', './', undefined, null],
  ])('%s %s -> %s', (type, name, linkname, expected) => {
    const reason = unsafeReason(type, name, linkname);
    if (expected === null) expect(reason).toBeNull();
    else expect(reason).toContain(expected);
  });
});

describe("unsafeReason with the archive's own symlinks", () => {
  it('refuses a name through an earlier symlink and a target resolving through one', () => {
    const links = new Set(['x', 'a/l']);
    expect(unsafeReason('file', 'x/etc/passwd', undefined, links)).toContain('passes through the symlink x');
    expect(unsafeReason('symlink', 'esc', 'x/..', links)).toContain('passes through the symlink x');
    expect(unsafeReason('file', 'a/l2', undefined, links)).toBeNull();
    expect(unsafeReason('symlink', 'a/m', 'l', links)).toContain('passes through the symlink a/l');
  });
});

describe('guardStream', () => {
  const mark = `.sbx-upload-complete.${'B'.repeat(22)}`;

  it('ends a whole archive with the completion mark: an empty file of the tool user, after every entry', async () => {
    const { archive, summary } = guardStream(Readable.from([await tarBytes([{ name: 'a.txt', content: 'a' }])]), owner, { mark });
    const out = join(await scratchDir('sbx-tar-'), 'out.tar');
    await pipeline(archive, createWriteStream(out));
    expect(await summary).toEqual({ entries: 1, bytes: 1 });
    const headers = await readEntries(out);
    expect(headers.map((h) => [h.name, h.size, h.uid])).toEqual([
      ['a.txt', 1, 1000],
      [mark, 0, 1000],
    ]);
  });

  it('stops at a refused entry: the archive fails with the refusal, the mark never comes, nothing after the entry is emitted', async () => {
    const input = await tarBytes([
      { name: 'first.txt', content: 'x'.repeat(2000) },
      { name: '../out.txt', content: 'x' },
      { name: 'after.txt', content: 'x' },
    ]);
    const { archive, summary } = guardStream(Readable.from([input]), owner, { mark });
    const emitted: Buffer[] = [];
    archive.on('data', (chunk: Buffer) => emitted.push(chunk));
    const failure = await new Promise<unknown>((resolve) => archive.once('error', resolve));
    expect(failure).toMatchObject({ code: 'files.unsafe_entry', details: { entry: '../out.txt' } });
    await expect(summary).rejects.toBe(failure);
    const text = Buffer.concat(emitted).toString('latin1');
    expect(text).not.toContain('after.txt');
    expect(text).not.toContain(mark);
  });
});

describe('guardArchive', () => {
  it('rejects the two-link escape (x -> ., esc -> x/.., esc/etc/f)', async () => {
    const input = await tarFile([
      { name: 'x', type: 'symlink', linkname: '.' },
      { name: 'esc', type: 'symlink', linkname: 'x/..' },
      { name: 'esc/etc/f', content: 'pwned' },
    ]);
    await expect(guardArchive(input, `${input}.out`, owner)).rejects.toMatchObject({
      code: 'files.unsafe_entry',
      details: { entry: 'esc' },
    });
  });

  it('re-owns entries to the tool user and strips setuid/setgid', async () => {
    const input = await tarFile([
      { name: 'bin/tool', mode: 0o4755, uid: 0, gid: 0, content: '#!/bin/sh' },
      { name: 'bin/link', type: 'symlink', linkname: 'tool' },
    ]);
    const output = `${input}.out`;
    const summary = await guardArchive(input, output, owner);
    expect(summary).toEqual({ entries: 2, bytes: 9 });
    const headers = await readEntries(output);
    expect(headers.map((h) => h.name)).toEqual(['bin/tool', 'bin/link']);
    expect(headers.every((h) => h.uid === 1000 && h.gid === 1000)).toBe(true);
    expect(headers[0]!.mode! & 0o7000).toBe(0);
    expect(headers[1]!.linkname).toBe('tool');
  });

  it('rejects the whole archive on one unsafe entry, naming it', async () => {
    const input = await tarFile([
      { name: 'ok', content: 'x' },
      { name: '../../etc/cron.d/x', content: 'x' },
    ]);
    const err = await guardArchive(input, `${input}.out`, owner).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('files.unsafe_entry');
    expect((err as AppError).details?.entry).toBe('../../etc/cron.d/x');
  });

  it('rejects bytes that are not a tar archive', async () => {
    const file = join(await scratchDir('sbx-tar-'), 'junk.tar');
    await writeFile(file, Buffer.alloc(2048, 7));
    await expect(guardArchive(file, `${file}.out`, owner)).rejects.toMatchObject({ code: 'files.invalid_archive' });
  });

  it('a member cut short (100 KB declared, 50 KB sent) is files.invalid_archive naming the entry and the offset, not an uncaught error', async () => {
    const full = await tarBytes([
      { name: 'ok.txt', content: 'fine' },
      { name: 'big.bin', content: 'x'.repeat(100_000) },
    ]);
    const file = join(await scratchDir('sbx-tar-'), 'cut.tar');
    await writeFile(file, full.subarray(0, 1024 + 512 + 50_000));
    await expect(guardArchive(file, `${file}.out`, owner)).rejects.toMatchObject({
      code: 'files.invalid_archive',
      details: { entry: 'big.bin', offset: 1024 + 512 + 50_000 },
    });
  });

  it("a header cut short or with a wrong checksum names the header's offset", async () => {
    const full = await tarBytes([
      { name: 'ok.txt', content: 'fine' },
      { name: 'second.txt', content: 'x' },
    ]);
    const file = join(await scratchDir('sbx-tar-'), 'bad.tar');
    await writeFile(file, full.subarray(0, 1024 + 200));
    await expect(guardArchive(file, `${file}.out`, owner)).rejects.toMatchObject({
      code: 'files.invalid_archive',
      details: { entry: 'second.txt', offset: 1224 },
    });
    const flipped = Buffer.from(full);
    flipped[1024 + 148] = flipped[1024 + 148]! ^ 1; // the second header's checksum field
    await writeFile(file, flipped);
    await expect(guardArchive(file, `${file}.out`, owner)).rejects.toMatchObject({
      code: 'files.invalid_archive',
      details: { entry: 'second.txt', offset: 1024 },
    });
  });
});
