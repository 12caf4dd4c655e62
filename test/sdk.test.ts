/**
 * The TypeScript SDK against a real control plane and real sandboxes: leasing with options,
 * streamed exec (resumed after dropped connections without repeating output), AbortSignal as
 * cancel, the file and git tools, tar transfers, typed errors with the platform's codes, renew,
 * release by `await using`, and the README's example script.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SbxClient, SbxError } from '../sdk/index.js';
import { REPO_ROOT, useHarness } from './fixtures/index.js';

const run = promisify(execFile);

const h = useHarness();
let sbx: Sandbox;
let local: string;

beforeAll(async () => {
  sbx = await Sandbox.create({ url: h.url, apiKey: h.apiKey, ttlSeconds: 600, env: { GREETING: 'hi' }, labels: { suite: 'sdk' } });
  local = await mkdtemp(join(tmpdir(), 'sbx-sdk-'));
});
afterAll(async () => {
  await rm(local, { recursive: true, force: true });
});

/** Expects `promise` to reject with an SbxError and returns it. */
async function sbxError(promise: Promise<unknown>): Promise<SbxError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SbxError);
  return err as SbxError;
}

/**
 * A fetch whose first `cuts` event streams break after `chunks` chunks, as a dropped connection
 * does; records the Last-Event-ID each events request carried.
 */
function droppingFetch(cuts: number, chunks: number): { fetch: typeof fetch; lastEventIds: Array<string | null> } {
  const lastEventIds: Array<string | null> = [];
  let cut = 0;
  const dropping: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!String(input).endsWith('/events')) return response;
    lastEventIds.push(new Headers(init?.headers).get('last-event-id'));
    if (cut >= cuts || !response.body) return response;
    cut += 1;
    const reader = response.body.getReader();
    let passed = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (passed >= chunks) {
          await reader.cancel();
          controller.error(new TypeError('terminated'));
          return;
        }
        passed += 1;
        const { done, value } = await reader.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return { fetch: dropping, lastEventIds };
}

describe('Sandbox', () => {
  it('create leases a ready sandbox with the given env and labels', async () => {
    expect(sbx.lease.status).toBe('ready');
    expect(sbx.lease.labels).toEqual({ suite: 'sdk' });
    expect(sbx.lease.manifest?.env.keys).toEqual(['GREETING']);
    const result = await sbx.exec('echo "$GREETING"');
    expect(result.stdout).toBe('hi\n');
  });

  it('exec streams stdout and stderr to their callbacks and resolves with the result, also for a non-zero exit', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const result = await sbx.exec('for i in 1 2 3; do echo out-$i; echo err-$i >&2; sleep 0.1; done; exit 3', {
      onStdout: (t) => out.push(t),
      onStderr: (t) => err.push(t),
    });
    expect(out.join('')).toBe('out-1\nout-2\nout-3\n');
    expect(err.join('')).toBe('err-1\nerr-2\nerr-3\n');
    expect(out.length).toBeGreaterThan(1);
    expect([result.status, result.exitCode, result.error?.code]).toEqual(['failed', 3, 'execution.nonzero_exit']);
    expect(result.receipt?.commitState).toBe('committed');
  });

  it('exec takes an argv, cwd, stdin and a timeout; a timeout is timed_out with commitState unknown', async () => {
    const argv = await sbx.exec(['cat'], { stdin: 'from stdin', cwd: '/tmp' });
    expect(argv.stdout).toBe('from stdin');
    const timed = await sbx.exec('sleep 20', { timeoutMs: 500, killGraceMs: 0 });
    expect([timed.status, timed.error?.code, timed.receipt?.commitState]).toEqual(['timed_out', 'execution.timeout', 'unknown']);
  });

  it('exec resumes a dropped event stream from the last event: every byte once, in order', async () => {
    const { fetch: dropping, lastEventIds } = droppingFetch(3, 2);
    const flaky = await Sandbox.connect(sbx.id, { url: h.url, apiKey: h.apiKey, fetch: dropping });
    const expected = Array.from({ length: 30 }, (_, i) => `line-${i + 1}\n`).join('');
    const chunks: string[] = [];
    const result = await flaky.exec('for i in $(seq 1 30); do echo line-$i; sleep 0.03; done', { onStdout: (t) => chunks.push(t) });
    expect(result.status).toBe('succeeded');
    expect(chunks.join('')).toBe(expected);
    // The stream was reopened after each drop, each time after the last event received.
    expect(lastEventIds.length).toBeGreaterThanOrEqual(4);
    expect(lastEventIds[0]).toBeNull();
    const resumed = lastEventIds.slice(1).map(Number);
    expect(resumed.every((seq) => seq > 0)).toBe(true);
    expect([...resumed].sort((a, b) => a - b)).toEqual(resumed);
  });

  it('aborting the signal cancels the running command: the result is cancelled with commitState unknown', async () => {
    const controller = new AbortController();
    const started = Date.now();
    const output: string[] = [];
    const pending = sbx.exec('echo started; sleep 60; echo never', { signal: controller.signal, onStdout: (t) => output.push(t) });
    await expect.poll(() => output.join(''), { timeout: 20_000, interval: 50 }).toContain('started');
    controller.abort();
    const result = await pending;
    expect([result.status, result.error?.code, result.receipt?.commitState]).toEqual(['cancelled', 'execution.cancelled', 'unknown']);
    expect(output.join('')).toBe('started\n');
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('files: write, read, edit with compare-and-swap, list, bytes as base64', async () => {
    const written = await sbx.files.write('/workspace/notes/a.txt', 'one\ntwo\n');
    expect(written.created).toBe(true);
    const read = await sbx.files.read('/workspace/notes/a.txt');
    expect([read.content, read.totalLines, read.sha256]).toEqual(['one\ntwo\n', 2, written.sha256]);
    const window = await sbx.files.read('/workspace/notes/a.txt', { offset: 2, limit: 1 });
    expect([window.content, window.truncated]).toEqual(['two\n', true]);
    const edited = await sbx.files.edit('/workspace/notes/a.txt', 'two', 'TWO', { expectedSha256: read.sha256 });
    expect(edited.replacements).toBe(1);
    expect(edited.diff).toContain('+TWO');
    const listing = await sbx.files.list('/workspace/notes');
    expect(listing.entries.map((e) => [e.path, e.type])).toEqual([['/workspace/notes/a.txt', 'file']]);
    const bytes = Uint8Array.from([0, 1, 2, 255, 254]);
    await sbx.files.write('/workspace/notes/b.bin', bytes);
    const binary = await sbx.files.read('/workspace/notes/b.bin', { encoding: 'base64' });
    expect(Buffer.from(binary.content, 'base64')).toEqual(Buffer.from(bytes));
  });

  it('a tool that fails throws SbxError with the platform code, retryability and the result', async () => {
    const missing = await sbxError(sbx.files.read('/workspace/nope.txt'));
    expect([missing.code, missing.domain, missing.retryability, missing.status]).toEqual(['files.not_found', 'files', 'no', null]);
    expect(missing.result?.status).toBe('failed');
    const stale = await sbxError(sbx.files.write('/workspace/notes/a.txt', 'x', { expectedSha256: '0'.repeat(64) }));
    expect([stale.code, stale.retryability]).toEqual(['files.conflict', 'reconcile_first']);
    expect((await sbx.files.read('/workspace/notes/a.txt')).content).toBe('one\nTWO\n');
    const noMatch = await sbxError(sbx.files.edit('/workspace/notes/a.txt', 'absent', 'x'));
    expect(noMatch.code).toBe('edit.no_match');
    const outside = await sbxError(sbx.files.read('/etc/passwd'));
    expect([outside.code, outside.status]).toEqual(['input.path_outside_workspace', 400]);
  });

  it('HTTP errors are SbxError with code and status; an unreachable API is api.unreachable', async () => {
    const policy = await sbxError(Sandbox.create({ url: h.url, apiKey: h.apiKey, policy: 'no-such-policy' }));
    expect([policy.code, policy.status, policy.retryability]).toEqual(['policy.not_found', 404, 'after_fix']);
    const key = await sbxError(Sandbox.connect(sbx.id, { url: h.url, apiKey: 'wrong' }));
    expect([key.code, key.status]).toEqual(['auth.invalid_api_key', 401]);
    // A port nothing listens on: one the system just gave out and took back.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as AddressInfo;
    await new Promise((r) => probe.close(r));
    const down = await sbxError(Sandbox.create({ url: `http://127.0.0.1:${port}`, apiKey: h.apiKey }));
    expect(down.code).toBe('api.unreachable');
    expect(down.details?.reason).toBe('ECONNREFUSED');
  });

  it('upload and download move a directory tree as tar', async () => {
    const src = join(local, 'src');
    await mkdir(join(src, 'sub'), { recursive: true });
    await writeFile(join(src, 'top.txt'), 'top\n');
    await writeFile(join(src, 'sub', 'deep.txt'), 'deep\n');
    await writeFile(join(src, 'skip.log'), 'skipped\n');
    const summary = await sbx.files.upload(src, '/workspace/up', { ignore: (rel) => rel.endsWith('.log') });
    expect(summary.entries).toBeGreaterThanOrEqual(3);
    const listing = await sbx.files.list('/workspace/up');
    expect(listing.entries.map((e) => e.path)).toEqual(['/workspace/up/sub', '/workspace/up/sub/deep.txt', '/workspace/up/top.txt']);
    const dest = join(local, 'dest');
    await mkdir(dest);
    await sbx.files.download('/workspace/up/sub', dest);
    expect(await readFile(join(dest, 'sub', 'deep.txt'), 'utf8')).toBe('deep\n');
    const missing = await sbxError(sbx.files.upload(join(local, 'absent'), '/workspace'));
    expect(missing.code).toBe('files.not_found');
  });

  it('uploads (sent with node:http, not fetch) answer as every request does: the archive lands, an error answer is its SbxError, no answer is api.unreachable; a client given its own fetch uploads through it', async () => {
    const src = join(local, 'tarred');
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'a.txt'), 'alpha\n');
    const { stdout: tar } = await promisify(execFile)('tar', ['-cf', '-', '-C', src, '.'], { encoding: 'buffer' });
    const client = new SbxClient(h.url, h.apiKey);
    expect(await client.uploadTar(sbx.id, '/workspace/tarred', tar)).toMatchObject({ path: '/workspace/tarred', entries: 2 });
    expect((await sbx.files.read('/workspace/tarred/a.txt')).content).toBe('alpha\n');
    const refused = await sbxError(client.uploadTar(sbx.id, '/workspace/tarred', Buffer.from('not a tar archive')));
    expect([refused.code, refused.status]).toEqual(['files.invalid_archive', 400]);
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as AddressInfo;
    await new Promise((r) => probe.close(r));
    const down = await sbxError(new SbxClient(`http://127.0.0.1:${port}`, h.apiKey).upload(sbx.id, src, '/workspace/x'));
    expect([down.code, down.details?.reason]).toEqual(['api.unreachable', 'ECONNREFUSED']);
    const seen: string[] = [];
    const counted = new SbxClient(h.url, h.apiKey, {
      fetch: (input, init) => (seen.push(`${init?.method} ${String(input)}`), fetch(input, init)),
    });
    await counted.upload(sbx.id, src, '/workspace/via-fetch');
    expect(seen).toEqual([`PUT ${h.url}/v1/sandboxes/${sbx.id}/files?path=%2Fworkspace%2Fvia-fetch`]);
    expect((await sbx.files.read('/workspace/via-fetch/a.txt')).content).toBe('alpha\n');
  });

  it('git.status and git.diff report the work tree', async () => {
    const setup = await sbx.exec(
      'cd /workspace && mkdir repo && cd repo && git init -q && git -c user.email=t@t -c user.name=t commit -q --allow-empty -m init && echo a > f.txt && git add f.txt && git -c user.email=t@t -c user.name=t commit -q -m f && echo b >> f.txt && touch new.txt',
    );
    expect(setup.status, setup.stderr).toBe('succeeded');
    const status = await sbx.git.status('/workspace/repo');
    expect(status.unstaged).toEqual([{ path: 'f.txt', status: 'M' }]);
    expect(status.untracked).toEqual(['new.txt']);
    const diff = await sbx.git.diff({ path: '/workspace/repo' });
    expect(diff.diff).toContain('+b');
    const notRepo = await sbxError(sbx.git.status('/tmp'));
    expect(notRepo.code).toBe('git.not_a_repository');
  });

  it('renew extends the lease (skipped where the control plane has no renew route)', async (ctx) => {
    const before = Date.parse(sbx.lease.expiresAt);
    const renewed = await sbx.renew(1200).catch((err: unknown) => err);
    if (renewed instanceof SbxError && renewed.code === 'api.route_not_found') ctx.skip();
    expect(renewed).not.toBeInstanceOf(Error);
    expect(Date.parse(sbx.lease.expiresAt)).toBeGreaterThan(before);
  });

  it('await using releases the sandbox when the block ends, also when it throws', async () => {
    let id = '';
    await expect(
      (async () => {
        await using scoped = await Sandbox.create({ url: h.url, apiKey: h.apiKey });
        id = scoped.id;
        throw new Error('boom');
      })(),
    ).rejects.toThrow('boom');
    expect((await h.client.getSandbox(id)).status).toBe('released');
    // Releasing again is success, not an error.
    const again = await Sandbox.connect(id, { url: h.url, apiKey: h.apiKey });
    expect((await again.release()).status).toBe('released');
  });

  it("the README's example script runs and releases its sandbox", async () => {
    const { stdout } = await run(process.execPath, [join(REPO_ROOT, 'dist/examples/quickstart.js')], {
      env: { ...process.env, SBX_URL: h.url, SBX_API_KEY: h.apiKey },
      timeout: 60_000,
    });
    expect(stdout).toContain('[stdout] hello, sbx');
    expect(stdout).toContain('[stderr] to stderr');
    expect(stdout).toMatch(/exit 0, status succeeded, receipt \S+ \(committed\)/);
    expect(stdout).toContain('echo "hi, $1"');
    expect(stdout).toContain('error code files.not_found (retryability no)');
    expect(stdout.trim().endsWith('released')).toBe(true);
    const id = /sandbox (\S+),/.exec(stdout)![1]!;
    expect((await h.client.getSandbox(id)).status).toBe('released');
  });
});
