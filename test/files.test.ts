/**
 * File transfer through the Docker archive API: round trips, and hostile archives rejected
 * whole before anything reaches the sandbox.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, writeFile, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SbxError } from '../sdk/index.js';
import { scratchDir, useLeasedSandbox, type Harness, tarBytes } from './fixtures/index.js';
import * as tar from 'tar-stream';

let h: Harness;
let leaseId: string;

const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

describe('files', () => {
  it('a directory with emoji, spaces and non-Latin names round-trips: upload, read in the sandbox, download', async () => {
    const local = await scratchDir('sbx-up-');
    await mkdir(join(local, 'dir with space'));
    await writeFile(join(local, 'dir with space', 'файл 🚀.txt'), 'content ünï\n');
    await writeFile(join(local, '数据.json'), '{"a":1}');
    const summary = await h.client.upload(leaseId, local, '/workspace/rt');
    // The archive's root directory, one directory and two files.
    expect(summary.entries).toBe(4);
    const r = await exec("cat '/workspace/rt/dir with space/файл 🚀.txt'; stat -c '%U' /workspace/rt/数据.json");
    expect(r.stdout).toBe('content ünï\nsandbox\n');
    const back = await scratchDir('sbx-down-');
    await h.client.download(leaseId, '/workspace/rt', back);
    expect(await readFile(join(back, 'rt', 'dir with space', 'файл 🚀.txt'), 'utf8')).toBe('content ünï\n');
    expect((await readdir(join(back, 'rt'))).sort()).toEqual(['dir with space', '数据.json'].sort());
  });

  it.each([
    [
      'a name with ..',
      [
        { name: 'ok.txt', content: 'fine' },
        { name: '../escape.txt', content: 'x' },
      ],
      '../escape.txt',
    ],
    ['an absolute name', [{ name: '/etc/evil', content: 'x' }], '/etc/evil'],
    ['a symlink to an absolute path', [{ name: 'link', type: 'symlink' as const, linkname: '/run/sbx' }], 'link'],
    ['a symlink climbing out', [{ name: 'a/b/link', type: 'symlink' as const, linkname: '../../../etc' }], 'a/b/link'],
    ['a hard link outside', [{ name: 'hard', type: 'link' as const, linkname: '../../etc/passwd' }], 'hard'],
    ['a device node', [{ name: 'dev', type: 'character-device' as const }], 'dev'],
  ])('rejects %s with files.unsafe_entry naming the entry, and writes nothing', async (_label, entries, entry) => {
    const dir = `/workspace/hostile-${Math.random().toString(36).slice(2)}`;
    const error = await h.client.uploadTar(leaseId, dir, await tarBytes(entries)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SbxError);
    expect((error as SbxError).code).toBe('files.unsafe_entry');
    expect((error as SbxError).info.details?.entry).toBe(entry);
    const r = await exec(`ls ${dir} 2>&1; ls /workspace/escape.txt 2>&1`);
    expect(r.stdout).toMatch(/No such file/);
    expect(r.stdout).not.toMatch(/ok\.txt/);
  });

  it('an upload through a symlink the sandbox planted is refused before anything moves (409: nothing merged through a link)', async () => {
    await exec('ln -sfn /etc /workspace/planted');
    const archive = await tarBytes([{ name: 'planted/evil-from-upload', content: 'x' }]);
    const error = await h.client.uploadTar(leaseId, '/workspace', archive).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SbxError);
    expect((error as SbxError).code).toBe('files.type_conflict');
    expect((error as SbxError).status).toBe(409);
    expect((error as SbxError).info.details).toMatchObject({ entry: 'planted' });
    const r = await exec('ls /etc/evil-from-upload 2>&1 || true');
    expect(r.stdout).toMatch(/No such file/);
  });

  it('an upload into a directory the tool user cannot write fails with the OS reason (EACCES) and the path', async () => {
    await exec('mkdir -p /workspace/locked && chmod 555 /workspace/locked');
    const error = await h.client
      .uploadTar(leaseId, '/workspace/locked', await tarBytes([{ name: 'x.txt', content: 'x' }]))
      .catch((e: unknown) => e);
    expect((error as SbxError).code).toBe('files.permission_denied');
    expect((error as SbxError).info.details?.errno).toBe('EACCES');
    expect(String((error as SbxError).info.details?.reason)).toContain('Permission denied');
    expect((error as SbxError).info.message).toContain('/workspace/locked');
  });

  it('a download of several hundred KiB arrives whole, every time (no chunk lost between the first and the rest)', async () => {
    await h.client.submitCall(
      leaseId,
      'exec',
      { cmd: 'mkdir -p /workspace/big && head -c 300000 /dev/urandom > /workspace/big/blob && sha256sum /workspace/big/blob' },
      { waitSeconds: 30 },
    );
    const expected = (
      (await h.client.submitCall(leaseId, 'exec', { cmd: 'sha256sum < /workspace/big/blob' }, { waitSeconds: 30 })) as { stdout: string }
    ).stdout.split(' ')[0];
    for (let i = 0; i < 5; i++) {
      const dir = await scratchDir('sbx-big-');
      await h.client.download(leaseId, '/workspace/big/blob', dir);
      expect(
        createHash('sha256')
          .update(await readFile(join(dir, 'blob')))
          .digest('hex'),
      ).toBe(expected);
    }
  });

  it('downloads the root itself, a symlink as a symlink, and a name ending in a newline as that very file', async () => {
    await exec(
      "mkdir -p /workspace/dl && cd /workspace/dl && echo target > f && ln -sfn f lnk && printf secret > $'nl\\n' && printf other > nl",
    );
    const entriesOf = async (path: string): Promise<tar.Header[]> => {
      const response = await h.client.raw('GET', `/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(path)}`);
      expect(response.status).toBe(200);
      const headers: tar.Header[] = [];
      const extract = tar.extract();
      extract.on('entry', (header, stream, next) => (headers.push(header), stream.on('end', next), stream.resume()));
      extract.end(Buffer.from(await response.arrayBuffer()));
      await new Promise<void>((r) => extract.on('finish', () => r()));
      return headers;
    };
    expect((await entriesOf('/workspace')).map((x) => x.name)).toContain('workspace/dl/f');
    expect((await entriesOf('/workspace/dl/lnk')).map((x) => [x.name, x.type, x.linkname])).toEqual([['lnk', 'symlink', 'f']]);
    const nl = await scratchDir('sbx-dl-');
    await h.client.download(leaseId, '/workspace/dl/nl\n', nl);
    expect(await readFile(join(nl, 'nl\n'), 'utf8')).toBe('secret');
  });

  it('a download or upload through a symlink leading out of /workspace is refused, even where the tool user could read', async () => {
    await exec('ln -sfn /etc /workspace/etc-out && ln -sfn /home/sandbox /workspace/home-out');
    const dir = await scratchDir('sbx-dl-');
    await expect(h.client.download(leaseId, '/workspace/etc-out/passwd', dir)).rejects.toMatchObject({
      code: 'input.path_outside_workspace',
      status: 400,
    });
    await expect(
      h.client.uploadTar(leaseId, '/workspace/home-out', await tarBytes([{ name: 'x.txt', content: 'x' }])),
    ).rejects.toMatchObject({ code: 'input.path_outside_workspace' });
    expect((await exec('ls /home/sandbox/x.txt 2>&1 || true')).stdout).toMatch(/No such file/);
    expect(await readdir(dir)).toEqual([]);
  });

  it('a download through a planted symlink reads no more than the tool user may (agent credentials stay closed)', async () => {
    await exec('ln -sfn /run/sbx /workspace/to-run');
    const dir = await scratchDir('sbx-dl-');
    await expect(h.client.download(leaseId, '/workspace/to-run/agent', dir)).rejects.toMatchObject({
      code: 'input.path_outside_workspace',
      status: 400,
    });
    expect(await readdir(dir)).toEqual([]);
  });

  it('a single file uploads into the target directory under its own name; a file as archive root is refused', async () => {
    const dir = await scratchDir('sbx-file-');
    await writeFile(join(dir, 'one.txt'), 'just one\n');
    await h.client.upload(leaseId, join(dir, 'one.txt'), '/workspace/single');
    expect((await exec('cat /workspace/single/one.txt')).stdout).toBe('just one\n');
    const rootFile = await tarBytes([{ name: '.', content: 'x' }]);
    await expect(h.client.uploadTar(leaseId, '/workspace/single', rootFile)).rejects.toMatchObject({
      code: 'files.unsafe_entry',
      status: 400,
    });
  });

  it('takes a tar body whatever its Content-Type (curl --data-binary sends a form type)', async () => {
    const response = await h.client.raw('PUT', `/v1/sandboxes/${leaseId}/files?path=/workspace/ct`, {
      body: await tarBytes([{ name: 'ct.txt', content: 'typed' }]),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(response.status).toBe(200);
    expect((await exec('cat /workspace/ct/ct.txt')).stdout).toBe('typed');
  });

  it('allows symlinks that stay inside the target (e.g. node_modules/.bin links)', async () => {
    const archive = await tarBytes([
      { name: 'pkg/cli.js', content: 'console.log(1)' },
      { name: '.bin/cli', type: 'symlink', linkname: '../pkg/cli.js' },
    ]);
    await h.client.uploadTar(leaseId, '/workspace/links', archive);
    const r = await exec('readlink /workspace/links/.bin/cli; cat /workspace/links/.bin/cli');
    expect(r.stdout).toBe('../pkg/cli.js\nconsole.log(1)');
  });

  it('a garbage body is files.invalid_archive; paths outside the workspace are refused', async () => {
    await expect(
      h.client.uploadTar(leaseId, '/workspace', Buffer.from('this is not a tar archive at all'.repeat(40))),
    ).rejects.toMatchObject({ code: 'files.invalid_archive' });
    await expect(h.client.uploadTar(leaseId, '/etc', await tarBytes([{ name: 'x', content: 'x' }]))).rejects.toMatchObject({
      code: 'input.path_outside_workspace',
      status: 400,
    });
    await expect(h.client.uploadTar(leaseId, '/workspace/../run/sbx', await tarBytes([{ name: 'x', content: 'x' }]))).rejects.toMatchObject(
      { code: 'input.path_outside_workspace' },
    );
    await expect(h.client.download(leaseId, '/run/sbx/agent', tmpdir())).rejects.toMatchObject({ code: 'input.path_outside_workspace' });
    await expect(h.client.download(leaseId, '/workspace/missing-file', tmpdir())).rejects.toMatchObject({
      code: 'files.not_found',
      status: 404,
    });
  });

  it('a truncated member (100 KB declared, 50 KB sent) is 400 files.invalid_archive naming the entry and offset; the control plane stays up', async () => {
    const full = await tarBytes([
      { name: 'first.txt', content: 'one' },
      { name: 'big.bin', content: 'x'.repeat(100_000) },
    ]);
    const cutAt = 1024 + 512 + 50_000;
    const error = await h.client.uploadTar(leaseId, '/workspace/truncated', full.subarray(0, cutAt)).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'files.invalid_archive', status: 400 });
    expect((error as SbxError).info.details).toMatchObject({ entry: 'big.bin', offset: cutAt });
    expect((await h.client.raw('GET', '/healthz')).status).toBe(200);
    expect((await exec('ls /workspace/truncated 2>&1')).stdout).toMatch(/No such file/);
  });

  it('an upload that fails in the sandbox (422 files.transfer_failed) writes none of its entries', async () => {
    await exec('mkdir -p /workspace/partial && echo keep > /workspace/partial/old.txt');
    const archive = await tarBytes([
      { name: 'a.txt', content: 'a' },
      { name: `${'n'.repeat(300)}.txt`, content: 'too long a name' },
      { name: 'z.txt', content: 'z' },
    ]);
    await expect(h.client.uploadTar(leaseId, '/workspace/partial', archive)).rejects.toMatchObject({
      code: 'files.transfer_failed',
      status: 422,
    });
    expect((await exec('ls -A /workspace/partial; ls -A /workspace | grep -c sbx-upload || true')).stdout).toBe('old.txt\n0\n');
  });

  it('a file entry over an existing directory is 409 files.type_conflict naming it; nothing is written, the directory stays', async () => {
    await exec('mkdir -p /workspace/clash/d && echo inside > /workspace/clash/d/kept.txt');
    const archive = await tarBytes([
      { name: 'new.txt', content: 'new' },
      { name: 'd', content: 'a file where a directory is' },
    ]);
    const error = await h.client.uploadTar(leaseId, '/workspace/clash', archive).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'files.type_conflict', status: 409 });
    expect((error as SbxError).info.details).toMatchObject({ entry: 'd', path: '/workspace/clash' });
    expect((await exec('ls -A /workspace/clash; cat /workspace/clash/d/kept.txt')).stdout).toBe('d\ninside\n');
  });

  it('a directory entry over an existing file, deep or at the target itself, is 409 files.type_conflict; nothing is written', async () => {
    await exec('mkdir -p /workspace/clash2/sub && echo file > /workspace/clash2/sub/f');
    const archive = await tarBytes([
      { name: 'top.txt', content: 'top' },
      { name: 'sub/g.txt', content: 'g' },
      { name: 'sub/f', type: 'directory' },
      { name: 'sub/f/inner.txt', content: 'x' },
    ]);
    const error = await h.client.uploadTar(leaseId, '/workspace/clash2', archive).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'files.type_conflict', status: 409 });
    expect((error as SbxError).info.details).toMatchObject({ entry: 'sub/f' });
    expect((await exec('ls -A /workspace/clash2 /workspace/clash2/sub; cat /workspace/clash2/sub/f')).stdout).toBe(
      '/workspace/clash2:\nsub\n\n/workspace/clash2/sub:\nf\nfile\n',
    );
    const onFile = await h.client
      .uploadTar(leaseId, '/workspace/clash2/sub/f/deeper', await tarBytes([{ name: 'x.txt', content: 'x' }]))
      .catch((e: unknown) => e);
    expect(onFile).toMatchObject({ code: 'files.type_conflict', status: 409, info: { details: { entry: null } } });
    expect((await exec('cat /workspace/clash2/sub/f')).stdout).toBe('file\n');
  });

  it('an upload into an existing tree merges: new entries added, files replaced, others kept, no staging left behind', async () => {
    await exec('mkdir -p /workspace/merge/a && echo old > /workspace/merge/a/replace.txt && echo stays > /workspace/merge/a/other.txt');
    const archive = await tarBytes([
      { name: 'a/replace.txt', content: 'new' },
      { name: 'a/b/added.txt', content: 'added' },
      { name: 'c.txt', content: 'c' },
    ]);
    await expect(h.client.uploadTar(leaseId, '/workspace/merge', archive)).resolves.toMatchObject({ entries: 3 });
    const r = await exec(
      'cd /workspace/merge && cat a/replace.txt a/other.txt a/b/added.txt c.txt; ls -A /workspace | grep -c sbx-upload || true',
    );
    expect(r.stdout).toBe('newstays\naddedc0\n');
  });
});
