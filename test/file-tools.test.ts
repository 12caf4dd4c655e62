/**
 * The file, search and git tools against a real sandbox: they act as the tool user, on
 * canonical paths inside the file roots, atomically, with before/after versions in the receipt.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
const sha = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');

async function call(tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const r = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 60 });
  if (!('receipt' in r)) throw new Error(`${tool} did not finish`);
  return r;
}
const data = (r: ToolResult): Record<string, any> => r.data as Record<string, any>;

useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

describe('write_file / read_file', () => {
  it('round-trips a file with emoji, spaces and non-Latin letters in its name; versions and diff in the receipt', async () => {
    const path = '/workspace/dir with space/файл 🚀.txt';
    await call('exec', { argv: ['mkdir', '-p', '/workspace/dir with space'] });
    const w = await call('write_file', { path, content: 'one\ntwo\n' });
    expect(w.status).toBe('succeeded');
    expect(w.receipt?.versions).toEqual([{ path, before: null, after: sha('one\ntwo\n') }]);
    expect(data(w).created).toBe(true);
    const r = await call('read_file', { path });
    expect(data(r)).toMatchObject({ content: 'one\ntwo\n', sha256: sha('one\ntwo\n'), totalLines: 2, totalBytes: 8, truncated: false });
    const w2 = await call('write_file', { path, content: 'one\nTWO\n' });
    expect(w2.receipt?.versions[0]).toMatchObject({ before: sha('one\ntwo\n'), after: sha('one\nTWO\n') });
    expect(data(w2).diff).toContain('-two');
    expect(data(w2).diff).toContain('+TWO');
    const listed = await call('list_files', { path: '/workspace/dir with space' });
    expect(data(listed).entries.map((e: { path: string }) => e.path)).toEqual([path]);
    const owner = await call('exec', { argv: ['stat', '-c', '%U %a', path] });
    expect(owner.stdout).toBe('sandbox 644\n');
  });

  it('expectedSha256 is a compare-and-swap: a mismatch is files.conflict naming both hashes and leaves the file untouched', async () => {
    const path = '/workspace/cas.txt';
    await call('write_file', { path, content: 'v1' });
    const stale = await call('write_file', { path, content: 'v2', expectedSha256: sha('v0') });
    expect(stale.status).toBe('failed');
    expect(stale.error?.code).toBe('files.conflict');
    expect(stale.error?.details).toMatchObject({ expected: sha('v0'), actual: sha('v1') });
    expect(stale.receipt?.commitState).toBe('not_started');
    expect(data(await call('read_file', { path })).content).toBe('v1');
    const ok = await call('write_file', { path, content: 'v2', expectedSha256: sha('v1') });
    expect(ok.status).toBe('succeeded');
    const exists = await call('write_file', { path, content: 'v3', createOnly: true });
    expect(exists.error?.code).toBe('files.exists');
  });

  it('reads a window of lines with the remaining range, refuses binary as text and returns it as base64', async () => {
    const lines = Array.from({ length: 10 }, (_, i) => `line ${i + 1}\n`).join('');
    await call('write_file', { path: '/workspace/lines.txt', content: lines });
    const r = await call('read_file', { path: '/workspace/lines.txt', offset: 3, limit: 2 });
    expect(data(r)).toMatchObject({
      content: 'line 3\nline 4\n',
      fromLine: 3,
      toLine: 4,
      totalLines: 10,
      truncated: true,
      remaining: { fromLine: 5, toLine: 10 },
      sha256: sha(lines),
    });
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 0xff]);
    await call('write_file', { path: '/workspace/blob.bin', content: bytes.toString('base64'), encoding: 'base64' });
    const text = await call('read_file', { path: '/workspace/blob.bin' });
    expect(text.error?.code).toBe('files.binary');
    const b64 = await call('read_file', { path: '/workspace/blob.bin', encoding: 'base64' });
    expect(Buffer.from(data(b64).content, 'base64').equals(bytes)).toBe(true);
    expect(data(b64).sha256).toBe(sha(bytes));
  });

  it('a symlink inside the workspace that points out is refused on its canonical path; a path outside is refused at submission', async () => {
    await call('exec', { cmd: 'ln -sfn /etc /workspace/etc-link' });
    const r = await call('read_file', { path: '/workspace/etc-link/passwd' });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('input.path_outside_workspace');
    expect(r.error?.details?.resolved).toBe('/etc/passwd');
    await expect(h.client.submitCall(leaseId, 'read_file', { path: '/etc/passwd' })).rejects.toMatchObject({
      status: 400,
      code: 'input.path_outside_workspace',
    });
    await expect(h.client.submitCall(leaseId, 'write_file', { path: '/workspace/../etc/x', content: '' })).rejects.toMatchObject({
      code: 'input.path_outside_workspace',
    });
  });
});

describe('a dangling symlink', () => {
  it('given to read_file, write_file or edit_file, or on the way to a path, is files.dangling_symlink naming the link and its target; nothing is written', async () => {
    await call('exec', {
      cmd: 'mkdir -p /workspace/dangle && ln -sfn missing-target.txt /workspace/dangle/link && ln -sfn /workspace/no-such-dir /workspace/dangle/dirlink',
    });
    const expected = { link: '/workspace/dangle/link', target: 'missing-target.txt', resolved: '/workspace/dangle/missing-target.txt' };
    for (const [tool, args] of [
      ['read_file', { path: '/workspace/dangle/link' }],
      ['write_file', { path: '/workspace/dangle/link', content: 'x' }],
      ['edit_file', { path: '/workspace/dangle/link', oldString: 'a', newString: 'b' }],
    ] as const) {
      const r = await call(tool, args);
      expect(r.status, tool).toBe('failed');
      expect(r.error?.code, tool).toBe('files.dangling_symlink');
      expect(r.error?.details, tool).toMatchObject(expected);
      expect(r.error?.message, tool).not.toMatch(/changed during the call/);
    }
    const through = await call('write_file', { path: '/workspace/dangle/dirlink/deep.txt', content: 'x' });
    expect(through.error?.code).toBe('files.dangling_symlink');
    expect(through.error?.details).toMatchObject({ link: '/workspace/dangle/dirlink', target: '/workspace/no-such-dir' });
    const listing = await call('exec', {
      cmd: 'ls -A /workspace/dangle; ls /workspace/no-such-dir /workspace/dangle/missing-target.txt 2>&1 | wc -l',
    });
    expect(listing.stdout).toBe('dirlink\nlink\n2\n');
  });
});

describe('edit_file', () => {
  it('replaces a unique match; zero or several matches are errors naming the count; replaceAll replaces all', async () => {
    const path = '/workspace/edit.txt';
    await call('write_file', { path, content: 'alpha beta alpha\ngamma\n' });
    const none = await call('edit_file', { path, oldString: 'delta', newString: 'x' });
    expect(none.error?.code).toBe('edit.no_match');
    expect(none.error?.details?.count).toBe(0);
    const two = await call('edit_file', { path, oldString: 'alpha', newString: 'x' });
    expect(two.error?.code).toBe('edit.ambiguous_match');
    expect(two.error?.details?.count).toBe(2);
    const one = await call('edit_file', { path, oldString: 'gamma', newString: 'GAMMA' });
    expect(one.status).toBe('succeeded');
    const all = await call('edit_file', { path, oldString: 'alpha', newString: 'A', replaceAll: true });
    expect(data(all).replacements).toBe(2);
    expect(data(await call('read_file', { path })).content).toBe('A beta A\nGAMMA\n');
  });

  it('keeps CRLF line endings and a BOM', async () => {
    const path = '/workspace/crlf.txt';
    const original = '\uFEFFfirst\r\nsecond\r\nthird\r\n';
    await call('write_file', { path, content: original });
    const r = await call('edit_file', { path, oldString: 'second\nthird', newString: 'SECOND\nTHIRD' });
    expect(r.status).toBe('succeeded');
    const bytes = Buffer.from(data(await call('read_file', { path, encoding: 'base64' })).content, 'base64');
    expect(bytes.toString('utf8')).toBe('\uFEFFfirst\r\nSECOND\r\nTHIRD\r\n');
  });
});

describe('list_files, glob, search', () => {
  it('list_files is sorted and bounded and lists symlinks without following them', async () => {
    await call('exec', {
      cmd: 'mkdir -p /workspace/tree/b /workspace/tree/a && touch /workspace/tree/a/1 /workspace/tree/a/2 /workspace/tree/b/3 && ln -sfn / /workspace/tree/root-link',
    });
    const r = await call('list_files', { path: '/workspace/tree' });
    expect(data(r).entries.map((e: { path: string; type: string }) => `${e.type}:${e.path}`)).toEqual([
      'directory:/workspace/tree/a',
      'file:/workspace/tree/a/1',
      'file:/workspace/tree/a/2',
      'directory:/workspace/tree/b',
      'file:/workspace/tree/b/3',
      'symlink:/workspace/tree/root-link',
    ]);
    const bounded = await call('list_files', { path: '/workspace/tree', limit: 2 });
    expect(data(bounded).entries).toHaveLength(2);
    expect(data(bounded).truncated).toBe(true);
  });

  it('glob matches under the directory, sorted, and a pattern climbing out finds nothing outside the roots', async () => {
    const r = await call('glob', { pattern: '**/[12]', path: '/workspace/tree' });
    expect(data(r).paths).toEqual(['/workspace/tree/a/1', '/workspace/tree/a/2']);
    const out = await call('glob', { pattern: '../../../etc/*', path: '/workspace/tree' });
    expect(data(out).paths).toEqual([]);
    // /workspace/tree/root-link -> /: a pattern naming the link matches the link, not what is behind it.
    const behind = await call('glob', { pattern: 'root-link/**', path: '/workspace/tree' });
    expect(data(behind).paths).toEqual(['/workspace/tree/root-link']);
    await call('exec', { cmd: 'mkdir -p /workspace/many && cd /workspace/many && seq 1 5000 | xargs touch' });
    const bounded = await call('glob', { pattern: '**', path: '/workspace/many', limit: 10 });
    expect(data(bounded).paths).toHaveLength(10);
    expect(data(bounded).truncated).toBe(true);
  });

  it('search returns file:line matches, literal or regex, bounded with truncated', async () => {
    await call('write_file', { path: '/workspace/search/a.ts', content: 'const x = 1;\nfunction needle() {}\nneedle();\n' });
    await call('write_file', { path: '/workspace/search/b.ts', content: 'a.b(needle)\n' });
    const r = await call('search', { pattern: 'needle\\(', path: '/workspace/search' });
    expect(
      data(r)
        .matches.map((m: { path: string; line: number }) => `${m.path}:${m.line}`)
        .sort(),
    ).toEqual(['/workspace/search/a.ts:2', '/workspace/search/a.ts:3']);
    const literal = await call('search', { pattern: 'a.b(', literal: true, path: '/workspace/search' });
    expect(data(literal).matches).toHaveLength(1);
    const bounded = await call('search', { pattern: 'needle', path: '/workspace/search', limit: 1 });
    expect(data(bounded).matches).toHaveLength(1);
    expect(data(bounded).truncated).toBe(true);
  });
});

describe('git_status / git_diff', () => {
  it('separates staged, unstaged, untracked and conflicted, and diffs the work tree', async () => {
    const setup = await call('exec', {
      cmd: [
        'set -e; cd /workspace && mkdir repo && cd repo',
        'git init -q -b main && git config user.email t@e && git config user.name t',
        'printf "base\\n" > conflict.txt && printf "one\\n" > tracked.txt && git add . && git commit -qm init',
        'git checkout -qb other && printf "theirs\\n" > conflict.txt && git commit -qam theirs',
        'git checkout -q main && printf "ours\\n" > conflict.txt && git commit -qam ours',
        'git merge other >/dev/null 2>&1 || true',
        'printf "two\\n" >> tracked.txt && printf "new\\n" > staged.txt && git add staged.txt && printf "u\\n" > untracked.txt',
      ].join('\n'),
    });
    expect(setup.status).toBe('succeeded');
    const s = await call('git_status', { path: '/workspace/repo' });
    expect(s.status).toBe('succeeded');
    expect(data(s).branch.head).toBe('main');
    expect(data(s).staged).toEqual([{ path: 'staged.txt', status: 'A' }]);
    expect(data(s).unstaged).toEqual([{ path: 'tracked.txt', status: 'M' }]);
    expect(data(s).untracked).toEqual(['untracked.txt']);
    expect(data(s).conflicted).toEqual([{ path: 'conflict.txt', status: 'UU' }]);
    const d = await call('git_diff', { path: '/workspace/repo' });
    expect(data(d).diff).toContain('+two');
    const notRepo = await call('git_status', { path: '/tmp' });
    expect(notRepo.error?.code).toBe('git.not_a_repository');
  });
});

describe('diffs', () => {
  it('a long diff stays bounded in the result and whole in an artifact (write_file and git_diff)', async () => {
    const lines = (tag: string): string => Array.from({ length: 5000 }, (_, i) => `${tag} line ${i}\n`).join('');
    await call('exec', { cmd: 'mkdir -p /workspace/bigdiff && cd /workspace/bigdiff && git init -q' });
    await call('write_file', { path: '/workspace/bigdiff/f.txt', content: lines('old') });
    await call('exec', { cmd: 'cd /workspace/bigdiff && git add f.txt && git -c user.email=a@b -c user.name=n commit -qm one' });
    const w = await call('write_file', { path: '/workspace/bigdiff/f.txt', content: lines('new') });
    expect(data(w).diffTruncated).toBe(true);
    expect(Buffer.byteLength(data(w).diff)).toBeLessThanOrEqual(64 * 1024);
    expect(w.artifacts.map((a) => a.id)).toEqual([data(w).diffArtifact]);
    const full = await h.client.raw('GET', `/v1/sandboxes/${leaseId}/artifacts/${data(w).diffArtifact}`);
    const patch = await full.text();
    expect(patch).toContain('-old line 4999');
    expect(patch).toContain('+new line 4999');
    const d = await call('git_diff', { path: '/workspace/bigdiff', maxBytes: 2048 });
    expect(Buffer.byteLength(data(d).diff)).toBeLessThanOrEqual(2048);
    const gitPatch = await (await h.client.raw('GET', `/v1/sandboxes/${leaseId}/artifacts/${data(d).diffArtifact}`)).text();
    expect(gitPatch).toContain('+new line 4999');
  });
});

describe('races', () => {
  it('a directory swapped for a symlink while file calls run never lets a read or a write leave the roots', async () => {
    await call('exec', { cmd: 'mkdir -p /workspace/race/real && echo inside > /workspace/race/real/passwd && echo shm > /dev/shm/passwd' });
    const swapper = (await h.client.submitCall(
      leaseId,
      'exec',
      {
        // renameat2(2) with RENAME_EXCHANGE (flag 2; syscall 316 on x86-64) swaps the directory and
        // the symlink atomically, as fast as perl can loop.
        cmd: 'cd /workspace/race && ln -sfn /dev/shm lnk && exec perl -e \'my ($a, $b) = ("real", "lnk"); while (1) { syscall(316, -100, $a, -100, $b, 2) }\'',
        background: true,
        timeoutMs: 120_000,
      },
      { waitSeconds: 30 },
    )) as ToolResult;
    expect(swapper.status).toBe('detached');
    const results = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        i % 2 === 0
          ? call('read_file', { path: '/workspace/race/real/passwd' })
          : call('write_file', { path: `/workspace/race/real/w${i}`, content: 'x' }),
      ),
    );
    await h.client.cancelCall(leaseId, swapper.callId);
    for (const r of results) {
      if (r.status === 'succeeded' && r.data && 'content' in r.data) expect(r.data.content).toBe('inside\n');
      if (r.status === 'succeeded' && r.data && 'path' in r.data) expect(String(r.data.path)).toMatch(/^\/workspace\//);
      if (r.status !== 'succeeded') expect(r.error?.code).toMatch(/^(input\.path_outside_workspace|files\.)/);
    }
    const leaked = await call('exec', {
      cmd: 'ls /dev/shm; ls -a /workspace/race/real /workspace/race/realx 2>/dev/null | grep -c sbx- || true',
    });
    expect(leaked.stdout.split('\n')).not.toContain('w1');
    expect(leaked.stdout).not.toMatch(/^w\d+$/m);
  }, 120_000);
});

describe('git hardening', () => {
  it('a repository whose own config names commands (fsmonitor, hooks, textconv) does not get them run by git_status/git_diff', async () => {
    const setup = await call('exec', {
      cmd: [
        'set -e; mkdir -p /workspace/evil && cd /workspace/evil && git init -q',
        'git config core.fsmonitor "touch /tmp/fsmonitor-ran; false"',
        'git config diff.x.textconv "sh -c \'touch /tmp/textconv-ran; cat \\"\\$1\\"\' sh"',
        'echo "*.txt diff=x" > .gitattributes && echo a > f.txt && git add . && git -c core.fsmonitor=false commit -qm one --no-verify -c user.email=a@b -c user.name=n 2>/dev/null || git -c core.fsmonitor=false -c user.email=a@b -c user.name=n commit -qm one',
        'echo b >> f.txt; rm -f /tmp/fsmonitor-ran /tmp/textconv-ran',
      ].join('\n'),
    });
    expect(setup.status).toBe('succeeded');
    expect((await call('git_status', { path: '/workspace/evil' })).status).toBe('succeeded');
    expect(data(await call('git_diff', { path: '/workspace/evil' })).diff).toContain('+b');
    const ran = await call('exec', { cmd: 'ls /tmp/fsmonitor-ran /tmp/textconv-ran 2>&1 || true' });
    expect(ran.stdout).not.toMatch(/^\/tmp\/(fsmonitor|textconv)-ran$/m);
  });
});

describe('ordering', () => {
  it('a read submitted right after an exec that writes the file sees the write (exec runs alone, in order)', async () => {
    const exec = await h.client.submitCall(leaseId, 'exec', { cmd: 'sleep 0.5; echo written > /workspace/ordered.txt' });
    const read = await h.client.submitCall(leaseId, 'read_file', { path: '/workspace/ordered.txt' }, { waitSeconds: 30 });
    expect((read as ToolResult).status).toBe('succeeded');
    expect(data(read as ToolResult).content).toBe('written\n');
    expect((await h.client.getCall(leaseId, exec.callId)).status).toBe('finished');
  });
});
