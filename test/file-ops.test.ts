/**
 * The file operation tools (`remove`, `move`, `make_dir`, `stat`) against a real sandbox: the
 * tool user's permissions, canonical paths inside the roots (a symlink out of them refused, a
 * root never removed), honest results with receipts; the SDK's `files.*` and `sbx fs`.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { Sandbox, SbxError } from '../sdk/index.js';
import { runCli, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
const sha = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');

async function call(tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const r = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 60 });
  if (!('receipt' in r)) throw new Error(`${tool} did not finish`);
  return r;
}
const data = (r: ToolResult): Record<string, any> => r.data as Record<string, any>;
const sh = async (cmd: string): Promise<string> => {
  const r = await call('exec', { cmd });
  expect(r.status, r.stderr).toBe('succeeded');
  return r.stdout;
};

useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

describe('make_dir and stat', () => {
  it('makes missing parents as the tool user, and an existing directory is created: false', async () => {
    const made = await call('make_dir', { path: '/workspace/mk/a/b' });
    expect(made.status).toBe('succeeded');
    expect(data(made)).toMatchObject({
      path: '/workspace/mk/a/b',
      created: true,
      createdDirs: ['/workspace/mk', '/workspace/mk/a', '/workspace/mk/a/b'],
    });
    expect(made.receipt?.commitState).toBe('committed');
    expect(await sh('stat -c "%U %F" /workspace/mk/a/b')).toBe('sandbox directory\n');
    const again = await call('make_dir', { path: '/workspace/mk/a/b' });
    expect(data(again)).toMatchObject({ created: false, createdDirs: [] });
    const noParents = await call('make_dir', { path: '/workspace/nope/x', parents: false });
    expect(noParents.error?.code).toBe('files.not_found');
    expect(await sh('test -e /workspace/nope && echo yes || echo no')).toBe('no\n');
    await call('write_file', { path: '/workspace/mk/file', content: 'x' });
    expect((await call('make_dir', { path: '/workspace/mk/file' })).error?.code).toBe('files.exists');
  });

  it('stat gives type, size, mode, owner and group names, mtime, and a symlink as the link with its target', async () => {
    await call('write_file', { path: '/workspace/st/f.txt', content: 'hello', mode: 0o640 });
    await sh(
      'touch -d "2024-01-02T03:04:05Z" /workspace/st/f.txt && ln -s f.txt /workspace/st/link && ln -s /nowhere /workspace/st/dangling',
    );
    const f = data(await call('stat', { path: '/workspace/st/f.txt' }));
    expect(f).toMatchObject({
      path: '/workspace/st/f.txt',
      type: 'file',
      sizeBytes: 5,
      mode: 0o640,
      permissions: 'rw-r-----',
      owner: 'sandbox',
      group: 'sandbox',
      mtime: '2024-01-02T03:04:05.000Z',
      symlinkTarget: null,
    });
    expect(data(await call('stat', { path: '/workspace/st/link' }))).toMatchObject({ type: 'symlink', symlinkTarget: 'f.txt' });
    // A dangling link is still a path that exists: stat reports the link.
    expect(data(await call('stat', { path: '/workspace/st/dangling' }))).toMatchObject({ type: 'symlink', symlinkTarget: '/nowhere' });
    expect(data(await call('stat', { path: '/workspace' }))).toMatchObject({ type: 'directory', path: '/workspace' });
    expect((await call('stat', { path: '/workspace/st/missing' })).error?.code).toBe('files.not_found');
  });
});

describe('remove', () => {
  it('a missing path succeeds with existed: false; a file goes with its version in the receipt', async () => {
    const missing = await call('remove', { path: '/workspace/never/was/here.txt' });
    expect(missing.status).toBe('succeeded');
    expect(data(missing)).toMatchObject({ existed: false, type: null });
    await call('write_file', { path: '/workspace/rm/one.txt', content: 'one' });
    const r = await call('remove', { path: '/workspace/rm/one.txt' });
    expect(data(r)).toMatchObject({ path: '/workspace/rm/one.txt', existed: true, type: 'file' });
    expect(r.receipt?.versions).toEqual([{ path: '/workspace/rm/one.txt', before: sha('one'), after: null }]);
    expect(await sh('test -e /workspace/rm/one.txt && echo yes || echo no')).toBe('no\n');
  });

  it('a directory with entries needs recursive (files.not_empty, nothing removed); a symlink goes, never its target', async () => {
    await sh('mkdir -p /workspace/tree/a/b && echo x > /workspace/tree/a/b/f && mkdir /workspace/empty');
    const refused = await call('remove', { path: '/workspace/tree' });
    expect(refused.status).toBe('failed');
    expect(refused.error?.code).toBe('files.not_empty');
    expect(refused.receipt?.commitState).toBe('not_started');
    expect(await sh('cat /workspace/tree/a/b/f')).toBe('x\n');
    expect(data(await call('remove', { path: '/workspace/empty' }))).toMatchObject({ existed: true, type: 'directory' });
    expect(data(await call('remove', { path: '/workspace/tree', recursive: true }))).toMatchObject({ existed: true, type: 'directory' });
    expect(await sh('test -e /workspace/tree && echo yes || echo no')).toBe('no\n');
    await sh('mkdir -p /workspace/keep && echo k > /workspace/keep/k && ln -s /workspace/keep /workspace/keeplink');
    expect(data(await call('remove', { path: '/workspace/keeplink', recursive: true }))).toMatchObject({ type: 'symlink' });
    expect(await sh('cat /workspace/keep/k')).toBe('k\n');
  });

  it('a root itself is refused (files.root_protected), however it is spelled', async () => {
    for (const path of ['/workspace', '/workspace/', '/workspace/./', '/tmp']) {
      const r = await call('remove', { path, recursive: true });
      expect(r.error?.code, path).toBe('files.root_protected');
    }
    expect(await sh('test -d /workspace && test -d /tmp && echo both')).toBe('both\n');
  });
});

describe('the roots hold', () => {
  it('a symlink escaping the roots is refused for every operation (input.path_outside_workspace), nothing changed outside', async () => {
    await sh('ln -sfn /etc /workspace/esc && echo s > /workspace/src.txt');
    const cases: Array<[string, Record<string, unknown>]> = [
      ['remove', { path: '/workspace/esc/hostname' }],
      ['stat', { path: '/workspace/esc/passwd' }],
      ['make_dir', { path: '/workspace/esc/newdir' }],
      ['move', { path: '/workspace/src.txt', destination: '/workspace/esc/moved.txt' }],
      ['move', { path: '/workspace/esc/hostname', destination: '/workspace/stolen' }],
    ];
    for (const [tool, args] of cases) {
      const r = await call(tool, args);
      expect(r.error?.code, `${tool} ${JSON.stringify(args)}`).toBe('input.path_outside_workspace');
      expect(r.receipt?.commitState).toBe('not_started');
    }
    expect(await sh('test -e /etc/hostname && test ! -e /etc/newdir && test ! -e /workspace/stolen && cat /workspace/src.txt')).toBe('s\n');
  });

  it('a path outside the roots is refused before anything is queued (400), the destination of a move too', async () => {
    for (const [tool, args] of [
      ['remove', { path: '/etc/passwd' }],
      ['move', { path: '/workspace/src.txt', destination: '/etc/x' }],
      ['stat', { path: '/workspace/../etc/passwd' }],
    ] as const) {
      const err = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 10 }).catch((e: unknown) => e);
      expect(err, tool).toBeInstanceOf(SbxError);
      expect((err as SbxError).info.code).toBe('input.path_outside_workspace');
      expect((err as SbxError).status).toBe(400);
    }
  });
});

describe('move', () => {
  it('renames across directories (making missing parents), refuses an existing destination unless overwrite', async () => {
    await call('write_file', { path: '/workspace/mv/a.txt', content: 'A' });
    await call('write_file', { path: '/workspace/mv/b.txt', content: 'B' });
    const moved = await call('move', { path: '/workspace/mv/a.txt', destination: '/workspace/mv2/deep/a.txt' });
    expect(data(moved)).toMatchObject({
      path: '/workspace/mv/a.txt',
      destination: '/workspace/mv2/deep/a.txt',
      type: 'file',
      atomic: true,
    });
    expect(moved.receipt?.versions).toEqual([
      { path: '/workspace/mv/a.txt', before: sha('A'), after: null },
      { path: '/workspace/mv2/deep/a.txt', before: null, after: sha('A') },
    ]);
    const refused = await call('move', { path: '/workspace/mv/b.txt', destination: '/workspace/mv2/deep/a.txt' });
    expect(refused.error?.code).toBe('files.exists');
    expect(await sh('cat /workspace/mv/b.txt /workspace/mv2/deep/a.txt')).toBe('BA');
    const over = await call('move', { path: '/workspace/mv/b.txt', destination: '/workspace/mv2/deep/a.txt', overwrite: true });
    expect(data(over)).toMatchObject({ replaced: true });
    expect(await sh('cat /workspace/mv2/deep/a.txt; test -e /workspace/mv/b.txt && echo left || echo gone')).toBe('Bgone\n');
    // A directory moves whole; into itself is refused; a missing source is files.not_found.
    await sh('mkdir -p /workspace/dirA/sub && echo d > /workspace/dirA/sub/f');
    expect(data(await call('move', { path: '/workspace/dirA', destination: '/workspace/dirB' }))).toMatchObject({ type: 'directory' });
    expect(await sh('cat /workspace/dirB/sub/f')).toBe('d\n');
    expect((await call('move', { path: '/workspace/dirB', destination: '/workspace/dirB/sub/x' })).error?.code).toBe('input.invalid');
    expect((await call('move', { path: '/workspace/dirB', destination: '/workspace/dirB/new/deeper' })).error?.code).toBe('input.invalid');
    expect(await sh('test -e /workspace/dirB/new && echo made || echo nothing')).toBe('nothing\n');
    expect((await call('move', { path: '/workspace/none', destination: '/workspace/x' })).error?.code).toBe('files.not_found');
    expect((await call('move', { path: '/workspace', destination: '/workspace/x' })).error?.code).toBe('files.root_protected');
  });

  it('moves between two writable roots (another filesystem: copied, then removed)', async () => {
    await call('write_file', { path: '/workspace/cross.txt', content: 'cross' });
    const r = await call('move', { path: '/workspace/cross.txt', destination: '/tmp/cross.txt' });
    expect(r.status, JSON.stringify(r.error)).toBe('succeeded');
    expect(typeof data(r).atomic).toBe('boolean');
    expect(await sh('cat /tmp/cross.txt; test -e /workspace/cross.txt && echo left || echo gone')).toBe('crossgone\n');
  });
});

describe('scheduling by declared accesses', () => {
  /** [start, end] in ms of a finished call, from the agent's receipt. */
  const span = (r: ToolResult): [number, number] => {
    expect(r.status, JSON.stringify(r.error)).toBe('succeeded');
    return [Date.parse(r.receipt!.startedAt), Date.parse(r.receipt!.endedAt)];
  };
  const big = 'x'.repeat(8 * 1024 * 1024);

  it('a recursive remove of one tree and a write elsewhere overlap; a write beneath the removed tree never does', async () => {
    // Overlap seen in any round proves the two ran side by side (a serialising scheduler never
    // shows one); up to three rounds keep a loaded machine's gap from hiding it.
    const rounds: Array<[[number, number], [number, number]]> = [];
    for (let round = 0; round < 3; round += 1) {
      await sh(
        `mkdir -p /workspace/par${round} && cd /workspace/par${round} && for d in $(seq 1 40); do mkdir d$d; for f in $(seq 1 50); do : > d$d/f$f; done; done`,
      );
      // The write is queued first (its 8 MiB body takes the longest to arrive), then the remove.
      const writeArgs = { path: `/workspace/other${round}.txt`, content: big };
      const queued = await h.client.submitCall(leaseId, 'write_file', writeArgs, { waitSeconds: 0 });
      const rm = await call('remove', { path: `/workspace/par${round}`, recursive: true });
      const write = await h.client.submitCall(leaseId, 'write_file', writeArgs, { callId: queued.callId, waitSeconds: 60 });
      if (!('receipt' in write)) throw new Error('write_file did not finish');
      rounds.push([span(rm), span(write)]);
      const [a, b] = rounds.at(-1)!;
      if (a[0] < b[1] && b[0] < a[1]) break;
    }
    const [a, b] = rounds.at(-1)!;
    expect(a[0], JSON.stringify(rounds)).toBeLessThan(b[1]);
    expect(b[0], JSON.stringify(rounds)).toBeLessThan(a[1]);

    await sh(
      'mkdir -p /workspace/conf && cd /workspace/conf && for d in $(seq 1 40); do mkdir d$d; for f in $(seq 1 50); do : > d$d/f$f; done; done',
    );
    const both = await Promise.all([
      call('remove', { path: '/workspace/conf', recursive: true }),
      call('write_file', { path: '/workspace/conf/d1/new.txt', content: big }),
    ]);
    const [first, second] = both.map(span).sort((p, q) => p[0] - q[0]);
    expect(second![0], JSON.stringify(both.map(span))).toBeGreaterThanOrEqual(first![1]);
  });
});

describe('interfaces', () => {
  it('the SDK: sandbox.files.makeDir/stat/move/remove, errors as SbxError with the code', async () => {
    const sbx = await Sandbox.connect(leaseId, { url: h.url, apiKey: h.apiKey });
    expect((await sbx.files.makeDir('/workspace/sdk/dir')).created).toBe(true);
    await sbx.files.write('/workspace/sdk/dir/f', 'sdk');
    expect((await sbx.files.stat('/workspace/sdk/dir/f')).sizeBytes).toBe(3);
    expect((await sbx.files.move('/workspace/sdk/dir/f', '/workspace/sdk/g')).destination).toBe('/workspace/sdk/g');
    const notEmpty = await sbx.files.remove('/workspace/sdk').catch((e: unknown) => e);
    expect((notEmpty as SbxError).info.code).toBe('files.not_empty');
    expect((await sbx.files.remove('/workspace/sdk', { recursive: true })).existed).toBe(true);
    expect((await sbx.files.remove('/workspace/sdk')).existed).toBe(false);
  });

  it('the CLI: sbx fs mkdir, stat, mv, rm', async () => {
    const target = { url: h.url, apiKey: h.apiKey };
    expect((await runCli(target, ['fs', 'mkdir', leaseId, '/workspace/cli/d'])).stdout).toContain('created');
    const stat = await runCli(target, ['--json', 'fs', 'stat', leaseId, '/workspace/cli/d']);
    expect(stat.code, stat.stderr).toBe(0);
    expect(JSON.parse(stat.stdout)).toMatchObject({ type: 'directory', owner: 'sandbox' });
    expect((await runCli(target, ['fs', 'mv', leaseId, '/workspace/cli/d', '/workspace/cli/e'])).code).toBe(0);
    const rm = await runCli(target, ['fs', 'rm', leaseId, '/workspace/cli']);
    expect(rm.code).not.toBe(0);
    expect(rm.stderr).toContain('files.not_empty');
    // The refusal names the API's argument; the CLI says which flag that is, on stderr alone.
    expect(rm.stderr).toContain(`sbx: add -r to remove it with everything under it: sbx fs rm -r ${leaseId} /workspace/cli`);
    const rmJson = await runCli(target, ['--json', 'fs', 'rm', leaseId, '/workspace/cli']);
    expect(JSON.parse(rmJson.stdout).error.code).toBe('files.not_empty');
    expect(rmJson.stdout).not.toContain('add -r');
    await runCli(target, ['fs', 'mkdir', leaseId, '/workspace/cli/f']);
    const mv = await runCli(target, ['fs', 'mv', leaseId, '/workspace/cli/e', '/workspace/cli/f']);
    expect(mv.code).not.toBe(0);
    expect(mv.stderr).toContain('files.exists');
    expect(mv.stderr).toContain('sbx: add --overwrite to replace the destination');
    const mkdir = await runCli(target, ['fs', 'mkdir', '--no-parents', leaseId, '/workspace/cli/none/g']);
    expect(mkdir.stderr).toContain('sbx: without --no-parents, missing parents are made');
    expect((await runCli(target, ['fs', 'rm', '-r', leaseId, '/workspace/cli'])).stdout).toContain('removed directory');
  });
});
