/**
 * The E2B-compatible API (issue 17 part 1) under the real `e2b` SDK (npm, 2.x), pointed at a
 * real control plane with the SDK's own settings (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY):
 * create with template, timeout, envs and metadata; list (pages, filters), getInfo, connect,
 * setTimeout, pause and connect again (resume), kill; createSnapshot, a sandbox from it,
 * listSnapshots, deleteSnapshot; getHost(port) as an sbx host-based port preview; commands.run
 * with callbacks, cwd, envs, a non-zero exit (CommandExitError), a timeout (TimeoutError), output
 * over the policy's limit; background beside other commands, with stdin, list, connect and kill;
 * watchDir; a PTY (create, sendInput, resize, kill); files read, write (one and several), list,
 * makeDir, exists, getInfo, rename, remove, a missing file (FileNotFoundError); the errors of a
 * bad key, an unknown template, another tenant's sandbox; malformed Connect frames and uploads.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
  type SandboxOpts,
} from 'e2b';
import http from 'node:http';
import { apiAs, putPolicyVariant, useHarness } from './fixtures/index.js';

// A preview domain: the SDK's getHost(port) names a host-based port preview of sbx.
const h = useHarness({ SBX_PREVIEW_DOMAIN: 'preview.test' });
const api = apiAs(() => h.url);
const saved = { url: process.env.E2B_API_URL, sandbox: process.env.E2B_SANDBOX_URL, key: process.env.E2B_API_KEY };
let otherKey: string;
const created: Sandbox[] = [];

beforeAll(async () => {
  process.env.E2B_API_URL = `${h.url}/e2b/api`;
  process.env.E2B_SANDBOX_URL = `${h.url}/e2b/envd`;
  process.env.E2B_API_KEY = h.apiKey;
  otherKey = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'e2b other', role: 'user', tenant: 'e2b-other' })).body.secret;
});
afterAll(async () => {
  for (const sandbox of created) await sandbox.kill().catch(() => undefined);
  for (const [name, value] of [
    ['E2B_API_URL', saved.url],
    ['E2B_SANDBOX_URL', saved.sandbox],
    ['E2B_API_KEY', saved.key],
  ] as const) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
});

async function newSandbox(opts: SandboxOpts = {}): Promise<Sandbox> {
  const sandbox = await Sandbox.create(opts);
  created.push(sandbox);
  return sandbox;
}

describe('E2B control API', () => {
  it('create, list, getInfo, setTimeout, pause, connect (resume) and kill a sandbox', async () => {
    const sandbox = await newSandbox({ template: 'base', timeoutMs: 600_000, envs: { GREETING: 'from-e2b' }, metadata: { job: 'e2b-1' } });
    const lease = (await api(h.apiKey, 'GET', `/v1/sandboxes/${sandbox.sandboxId}`)).body;
    expect(lease).toMatchObject({ status: 'ready', policy: { name: 'default' }, labels: { job: 'e2b-1' } });
    expect((await sandbox.commands.run('echo $GREETING')).stdout).toBe('from-e2b\n');

    const listed = await Sandbox.list({ query: { metadata: { job: 'e2b-1' } } }).nextItems();
    expect(listed.map((s) => [s.sandboxId, s.state, s.metadata.job, s.templateId])).toEqual([
      [sandbox.sandboxId, 'running', 'e2b-1', 'base'],
    ]);
    const info = await sandbox.getInfo();
    expect([info.sandboxId, info.state, info.templateId]).toEqual([sandbox.sandboxId, 'running', 'base']);

    const before = Date.parse(lease.expiresAt);
    await sandbox.setTimeout(1_200_000);
    expect(Date.parse((await api(h.apiKey, 'GET', `/v1/sandboxes/${sandbox.sandboxId}`)).body.expiresAt)).toBeGreaterThan(before);

    expect(await sandbox.pause()).toBe(true);
    expect((await sandbox.getInfo()).state).toBe('paused');
    const again = await Sandbox.connect(sandbox.sandboxId);
    expect((await again.getInfo()).state).toBe('running');
    expect((await again.commands.run('echo back')).stdout).toBe('back\n');

    expect(await sandbox.kill()).toBe(true);
    expect(await sandbox.kill()).toBe(false);
    await expect(Sandbox.connect(sandbox.sandboxId)).rejects.toBeInstanceOf(NotFoundError);
    await expect(Sandbox.getInfo(sandbox.sandboxId)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('a bad key is AuthenticationError; an unknown template a 404 SandboxError; another tenant cannot see a sandbox', async () => {
    await expect(Sandbox.create({ apiKey: 'sbx_not_a_key' })).rejects.toBeInstanceOf(AuthenticationError);
    const unknown = await Sandbox.create({ template: 'no-such-template' }).catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(SandboxError);
    expect(String((unknown as Error).message)).toMatch(/^404: template not found/);
    const sandbox = await newSandbox();
    await expect(Sandbox.getInfo(sandbox.sandboxId, { apiKey: otherKey })).rejects.toBeInstanceOf(NotFoundError);
    await expect(Sandbox.connect(sandbox.sandboxId, { apiKey: otherKey })).rejects.toBeInstanceOf(NotFoundError);
    expect(await Sandbox.kill(sandbox.sandboxId, { apiKey: otherKey })).toBe(false);
    expect((await Sandbox.list({ apiKey: otherKey }).nextItems()).map((s) => s.sandboxId)).not.toContain(sandbox.sandboxId);
  });

  it('list pages by limit and filters by metadata', async () => {
    const ids = [(await newSandbox({ metadata: { page: 'p' } })).sandboxId, (await newSandbox({ metadata: { page: 'p' } })).sandboxId];
    const pages = Sandbox.list({ limit: 1, query: { metadata: { page: 'p' } } });
    const first = await pages.nextItems();
    expect([first.length, pages.hasNext]).toEqual([1, true]);
    const second = await pages.nextItems();
    expect([second.length, pages.hasNext]).toEqual([1, false]);
    expect([...first, ...second].map((s) => s.sandboxId).sort()).toEqual(ids.sort());
  });
});

describe('E2B snapshots', () => {
  it('createSnapshot, a sandbox created from it has its files, listSnapshots, deleteSnapshot', async () => {
    const sandbox = await newSandbox();
    await sandbox.files.write('/workspace/kept.txt', 'from the snapshot');
    const snapshot = await sandbox.createSnapshot();
    expect(snapshot.snapshotId).toMatch(/^snap_/);
    expect((await sandbox.listSnapshots().nextItems()).map((s) => s.snapshotId)).toEqual([snapshot.snapshotId]);
    const copy = await newSandbox({ template: snapshot.snapshotId } as SandboxOpts);
    expect(await copy.files.read('/workspace/kept.txt')).toBe('from the snapshot');
    await copy.kill();
    expect(await Sandbox.deleteSnapshot(snapshot.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snapshot.snapshotId)).toBe(false);
  });
});

/** GET `path` from the control plane with `headers` (a preview host's Host among them): status, headers, body. */
function get(path: string, headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const url = new URL(h.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('E2B getHost', () => {
  it('getHost(port) is the host of an sbx port preview: a server in the sandbox answers there with a preview token', async () => {
    await putPolicyVariant(h, 'e2b-ports', (policy) => void (policy.ports = { allowed: [8000] }));
    const sandbox = await newSandbox({ template: 'e2b-ports' } as SandboxOpts);
    await sandbox.files.write('/workspace/site/index.html', 'served from the sandbox');
    await sandbox.commands.run('cd /workspace/site && exec python3 -m http.server 8000 --bind 127.0.0.1', { background: true });
    const host = sandbox.getHost(8000);
    expect(host).toBe(`8000-${sandbox.sandboxId}.preview.test`);
    // The host needs sbx's preview token (E2B's hosts are public by default): the minted URL's moves into a cookie.
    const minted = new URL(
      (await api(h.apiKey, 'POST', `/v1/sandboxes/${sandbox.sandboxId}/ports/8000/url`, { expiresInSeconds: 600 })).body.hostUrl,
    );
    expect(minted.hostname).toBe(host);
    const first = await get(`${minted.pathname}${minted.search}`, { host });
    const cookie = String(first.headers['set-cookie']?.[0]).split(';')[0]!;
    await expect.poll(async () => (await get('/', { host, cookie })).body, { timeout: 15_000 }).toBe('served from the sandbox');
    expect((await get('/', { host })).status).toBe(401);
  });
});

describe('E2B commands', () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await newSandbox();
  });

  it('run: output through callbacks and in the result, cwd and envs; each command is an sbx call with a receipt', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const result = await sandbox.commands.run('echo "$A in $(pwd)"; echo warn >&2', {
      cwd: '/tmp',
      envs: { A: 'alpha' },
      onStdout: (d) => void out.push(d),
      onStderr: (d) => void err.push(d),
    });
    expect([result.exitCode, result.stdout, result.stderr]).toEqual([0, 'alpha in /tmp\n', 'warn\n']);
    expect([out.join(''), err.join('')]).toEqual(['alpha in /tmp\n', 'warn\n']);
    const calls = (await api(h.apiKey, 'GET', `/v1/sandboxes/${sandbox.sandboxId}/calls`)).body.calls as Array<{
      callId: string;
      tool: string;
    }>;
    const call = (await api(h.apiKey, 'GET', `/v1/sandboxes/${sandbox.sandboxId}/calls/${calls[0]!.callId}`)).body;
    expect(call).toMatchObject({
      tool: 'exec',
      args: { argv: ['/bin/bash', '-l', '-c', 'echo "$A in $(pwd)"; echo warn >&2'], cwd: '/tmp' },
    });
    expect(call.result.receipt).toMatchObject({ callId: call.callId, commitState: 'committed' });
  });

  it('a non-zero exit is CommandExitError; a timeout is TimeoutError', async () => {
    const failed = await sandbox.commands.run('echo partial; exit 3').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(CommandExitError);
    expect([(failed as CommandExitError).exitCode, (failed as CommandExitError).stdout]).toEqual([3, 'partial\n']);
    await expect(sandbox.commands.run('sleep 30', { timeoutMs: 1500 })).rejects.toBeInstanceOf(TimeoutError);
  });

  it('background: runs beside other commands; stdin, list, connect and kill; a finished one cannot be connected or killed', async () => {
    const seen: string[] = [];
    const handle = await sandbox.commands.run('cat', { background: true, stdin: true, onStdout: (d) => void seen.push(d) });
    // A command beside it runs now, not after it (cat waits for stdin forever).
    expect((await sandbox.commands.run('echo side by side')).stdout).toBe('side by side\n');
    expect((await sandbox.commands.list()).map((p) => p.pid)).toContain(handle.pid);
    const attached: string[] = [];
    const second = await sandbox.commands.connect(handle.pid, { onStdout: (d) => void attached.push(d) });
    await sandbox.commands.sendStdin(handle.pid, 'hello\n');
    await expect.poll(() => [seen.join(''), attached.join('')]).toEqual(['hello\n', 'hello\n']);
    expect(await sandbox.commands.kill(handle.pid)).toBe(true);
    await expect(handle.wait()).rejects.toBeInstanceOf(CommandExitError);
    await second.disconnect();
    expect((await sandbox.commands.list()).map((p) => p.pid)).not.toContain(handle.pid);
    expect(await sandbox.commands.kill(handle.pid)).toBe(false);
    await expect(sandbox.commands.connect(handle.pid)).rejects.toBeInstanceOf(NotFoundError);
    expect(await sandbox.commands.kill(999_999)).toBe(false);
  });

  it('output over the policy limit is cut with a note on stderr, never silently', async () => {
    const result = await sandbox.commands.run("head -c 5000000 /dev/zero | tr '\\0' x");
    expect(result.stdout.length).toBe(4 * 1024 * 1024);
    expect(result.stderr).toMatch(
      /\[sbx: stdout cut after 4194304 bytes by the policy's output limit; its whole bytes are an artifact of call call_/,
    );
  });
});

describe('E2B watchDir', () => {
  it('reports created, written, renamed and removed files under the watched directory, by name', async () => {
    const sandbox = await newSandbox();
    await sandbox.files.makeDir('/workspace/w');
    const events: string[] = [];
    const handle = await sandbox.files.watchDir('/workspace/w', (e) => void events.push(`${e.type} ${e.name}`), { recursive: true });
    await sandbox.files.write('/workspace/w/a.txt', 'one');
    await sandbox.files.rename('/workspace/w/a.txt', '/workspace/w/b.txt');
    await sandbox.files.remove('/workspace/w/b.txt');
    await expect.poll(() => events).toEqual(expect.arrayContaining(['create a.txt', 'rename a.txt', 'create b.txt', 'remove b.txt']));
    await handle.stop();
    // write_file is atomic (a temporary file renamed into place): its temporary file's events come too.
    const others = events.filter((e) => !/ [ab]\.txt$/.test(e));
    expect(
      others.every((e) => /^(create|write|rename|remove) \.[^/]+$/.test(e)),
      others.join(', '),
    ).toBe(true);
  });
});

describe('E2B PTY', () => {
  it('create, sendInput, resize and kill a PTY: a terminal whose size follows a resize', async () => {
    const sandbox = await newSandbox();
    const output: Buffer[] = [];
    const text = (): string => Buffer.concat(output).toString('utf8');
    const pty = await sandbox.pty.create({ cols: 80, rows: 24, onData: (d) => void output.push(Buffer.from(d)), timeoutMs: 0 });
    await sandbox.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; tty\n'));
    await expect.poll(text).toMatch(/24 80\r?\n\/dev\/pts\/\d+/);
    await sandbox.pty.resize(pty.pid, { cols: 100, rows: 30 });
    await sandbox.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
    await expect.poll(text).toMatch(/30 100/);
    expect((await sandbox.commands.list()).map((p) => p.pid)).toContain(pty.pid);
    expect(await sandbox.pty.kill(pty.pid)).toBe(true);
    await expect(pty.wait()).rejects.toBeInstanceOf(CommandExitError);
  });
});

describe('E2B files', () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await newSandbox();
  });

  it('write, read, list, makeDir, exists, getInfo, rename, remove; a missing file is FileNotFoundError', async () => {
    const info = await sandbox.files.write('/workspace/e2b/a.txt', 'hello e2b\n');
    expect([info.path, info.name]).toEqual(['/workspace/e2b/a.txt', 'a.txt']);
    expect(await sandbox.files.read('/workspace/e2b/a.txt')).toBe('hello e2b\n');
    const bytes = Uint8Array.from([0, 1, 2, 255]);
    await sandbox.files.write([
      { path: '/workspace/e2b/b.bin', data: bytes.buffer as ArrayBuffer },
      { path: '/workspace/e2b/c.txt', data: 'c' },
    ]);
    expect(Buffer.from(await sandbox.files.read('/workspace/e2b/b.bin', { format: 'bytes' }))).toEqual(Buffer.from(bytes));
    expect(await sandbox.files.makeDir('/workspace/e2b/sub')).toBe(true);
    expect(await sandbox.files.makeDir('/workspace/e2b/sub')).toBe(false);
    const names = (await sandbox.files.list('/workspace/e2b')).map((e) => `${e.name}:${e.type}`).sort();
    expect(names).toEqual(['a.txt:file', 'b.bin:file', 'c.txt:file', 'sub:dir']);
    expect(await sandbox.files.exists('/workspace/e2b/a.txt')).toBe(true);
    expect(await sandbox.files.exists('/workspace/e2b/none')).toBe(false);
    const stat = await sandbox.files.getInfo('/workspace/e2b/a.txt');
    expect([stat.type, stat.size, stat.permissions]).toEqual(['file', 10, '-rw-r--r--']);
    const moved = await sandbox.files.rename('/workspace/e2b/a.txt', '/workspace/e2b/sub/a.txt');
    expect(moved.path).toBe('/workspace/e2b/sub/a.txt');
    await sandbox.files.remove('/workspace/e2b/sub');
    expect(await sandbox.files.exists('/workspace/e2b/sub')).toBe(false);
    await expect(sandbox.files.read('/workspace/e2b/none')).rejects.toBeInstanceOf(FileNotFoundError);
  });
});

describe('E2B wire edges', () => {
  it('malformed Connect frames and messages get Connect errors; what is not offered says so', async () => {
    const sandbox = await newSandbox();
    const token = (sandbox as unknown as { envdAccessToken?: string }).envdAccessToken ?? '';
    const headers = { 'e2b-sandbox-id': sandbox.sandboxId, 'x-access-token': token };
    const post = (path: string, type: string, body: Buffer | string) =>
      fetch(`${h.url}/e2b/envd${path}`, { method: 'POST', headers: { ...headers, 'content-type': type }, body });
    const garbage = await post('/process.Process/Start', 'application/connect+json', Buffer.from([0, 0, 0, 0, 9, 1, 2]));
    expect(garbage.status).toBe(200);
    const frame = Buffer.from(await garbage.arrayBuffer());
    expect([frame[0], JSON.parse(frame.subarray(5).toString()).error.code]).toEqual([2, 'invalid_argument']);
    const unary = await post('/filesystem.Filesystem/Stat', 'application/json', '{not json');
    expect([unary.status, ((await unary.json()) as { code: string }).code]).toEqual([400, 'invalid_argument']);
    // Bad JSON on the control API says so with sbx's code, as every other error there does.
    const badCreate = await fetch(`${h.url}/e2b/api/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': h.apiKey, 'content-type': 'application/json' },
      body: '{bad',
    });
    expect([badCreate.status, await badCreate.json()]).toEqual([
      400,
      { code: 400, message: expect.stringMatching(/^input\.invalid_json: /) },
    ]);
    // A body of JSON null is not "no body": refused like [] (it leased a default sandbox).
    const nullCreate = await fetch(`${h.url}/e2b/api/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': h.apiKey, 'content-type': 'application/json' },
      body: 'null',
    });
    expect([nullCreate.status, ((await nullCreate.json()) as { message: string }).message]).toEqual([
      400,
      expect.stringMatching(/^input\.invalid: /),
    ]);
    const untyped = await fetch(`${h.url}/e2b/envd/filesystem.Filesystem/Stat`, { method: 'POST', headers, body: '{}' });
    expect([untyped.status, ((await untyped.json()) as { code: string }).code]).toEqual([400, 'invalid_argument']);
    const files = new FormData();
    for (let i = 0; i < 1001; i += 1) files.append('file', new Blob(['x']), `/workspace/many/${i}`);
    const many = await fetch(`${h.url}/e2b/envd/files`, { method: 'POST', headers, body: files });
    expect([many.status, ((await many.json()) as { message: string }).message]).toEqual([
      413,
      expect.stringMatching(/more than 1000 files/),
    ]);
    const none = await fetch(`${h.url}/e2b/envd/files`, { method: 'POST', headers, body: new FormData() });
    expect(none.status).toBe(400);
    const unknown = await post('/filesystem.Filesystem/Nope', 'application/json', '{}');
    expect(((await unknown.json()) as { code: string }).code).toBe('unimplemented');
    const noToken = await fetch(`${h.url}/e2b/envd/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: { 'e2b-sandbox-id': sandbox.sandboxId, 'content-type': 'application/json' },
      body: '{"path":"/tmp"}',
    });
    expect([noToken.status, ((await noToken.json()) as { code: string }).code]).toEqual([401, 'unauthenticated']);
    const noMethod = await sandbox.files.watchDir('/etc', () => undefined).catch((e: unknown) => e);
    expect(noMethod).toBeInstanceOf(InvalidArgumentError);
    expect(String((noMethod as Error).message)).toMatch(/input.path_outside_workspace/);
  });
});
