/**
 * What a new user's walk through the README's interactive features (issue 13) found, each fixed
 * and kept fixed against a real sandbox: `sbx shell` ended by a signal removes its terminal, its
 * piped input ends also after an unfinished last line; NUL in a command or path is a 400 that
 * says so; a terminal's end kills also what left its session with setsid.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { Sandbox } from '../sdk/index.js';
import { apiAs, eventually, REPO_ROOT, runCli, startCli, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});
const api = apiAs(() => h.url);
const call = (method: string, path: string, body?: unknown) => api(h.apiKey, method, `/v1/sandboxes/${leaseId}${path}`, body);

/** What a test opened (`/terminals/ID`, `/sessions/ID`): deleted after it, also when it failed. */
const opened: string[] = [];
afterEach(async () => {
  for (const path of opened.splice(0)) await call('DELETE', path);
});

/**
 * Pids of the sandbox's live processes whose command matches `pattern` (a regular expression), one
 * a line; '' for none. Read through the process list, not an exec: an exec's sweep would kill the
 * very strays a test looks for.
 */
async function pgrep(pattern: string): Promise<string> {
  const list = await call('GET', '/processes');
  expect(list.status, JSON.stringify(list.body)).toBe(200);
  const regex = new RegExp(pattern);
  return (list.body.processes as Array<{ pid: number; command: string; state: string }>)
    .filter((p) => regex.test(p.command) && p.state !== 'Z')
    .map((p) => p.pid)
    .join('\n');
}

describe('sbx shell', () => {
  it.each(['SIGINT', 'SIGTERM'] as const)('ended by %s with piped stdin, it deletes its terminal: the program stops', async (signal) => {
    const marker = signal === 'SIGINT' ? 6101 : 6102;
    const child = spawn(
      process.execPath,
      [join(REPO_ROOT, 'dist/cli/sbx.js'), '--url', h.url, '--api-key', h.apiKey, 'shell', leaseId, '--cmd', `sleep ${marker}`],
      { stdio: ['pipe', 'ignore', 'pipe'] },
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await eventually(
        () => pgrep(`sleep ${marker}$`),
        (pids) => pids !== '',
      );
      child.kill(signal);
      expect(await exited).toBe(signal === 'SIGINT' ? 130 : 143);
      await eventually(
        () => pgrep(`sleep ${marker}$`),
        (pids) => pids === '',
      );
    } finally {
      child.kill('SIGKILL');
      // An exec sweeps what no terminal keeps.
      await exec({ cmd: 'true' });
    }
  });

  it('a missing --cwd exits 126 as sbx exec does (nothing ran)', async () => {
    const shell = await runCli({ url: h.url, apiKey: h.apiKey }, ['shell', leaseId, '--cwd', '/nonexistent']);
    const exec = await runCli({ url: h.url, apiKey: h.apiKey }, ['exec', leaseId, '--cwd', '/nonexistent', '--', 'true']);
    expect(shell.code, shell.stderr).toBe(126);
    expect(exec.code, exec.stderr).toBe(126);
  });

  it('piped input without a final newline still runs and ends the shell', async () => {
    const run = await runCli({ url: h.url, apiKey: h.apiKey }, ['shell', leaseId], 'echo A$((40+2))');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/A42/);
  });
});

describe('sbx exec stdin', () => {
  it('streams piped stdin to the command; --no-stdin gives it an empty one', async () => {
    const piped = await runCli({ url: h.url, apiKey: h.apiKey }, ['exec', leaseId, '--', 'cat'], 'one\ntwo');
    expect(piped.code, piped.stderr).toBe(0);
    expect(piped.stdout).toBe('one\ntwo');
    const none = await runCli({ url: h.url, apiKey: h.apiKey }, ['exec', leaseId, '--no-stdin', '--', 'cat'], 'ignored');
    expect(none.code, none.stderr).toBe(0);
    expect(none.stdout).toBe('');
  });

  it('exits when its command ends, even while a piped stdin stays open (its writer lives on)', async () => {
    const cli = startCli({ url: h.url, apiKey: h.apiKey }, ['exec', leaseId, '--', 'echo', 'done']);
    cli.child.stdin.write('never read\n');
    // stdin is never ended: the CLI must not wait for it once the command is over.
    const run = await cli.done;
    expect([run.code, run.stdout]).toEqual([0, 'done\n']);
  });
});

describe('background exec from the SDK', () => {
  it('sandbox.exec(cmd, {background: true}) resolves with the detached handle while the command runs', async () => {
    const sbx = await Sandbox.connect(leaseId, { url: h.url, apiKey: h.apiKey });
    const startedMs = Date.now();
    const handle = await sbx.exec('sleep 6401', { background: true });
    try {
      expect(handle.status).toBe('detached');
      expect(Date.now() - startedMs).toBeLessThan(30_000);
      expect(await pgrep('^sleep 6401$')).not.toBe('');
    } finally {
      await h.client.cancelCall(leaseId, handle.callId);
    }
  });
});

describe('NUL in commands and paths', () => {
  it('exec and terminal commands with NUL are 400 input.invalid naming the field; nothing starts', async () => {
    const execNul = await call('POST', '/calls', { tool: 'exec', args: { cmd: 'echo a\u0000b' } });
    expect(execNul.status, JSON.stringify(execNul.body)).toBe(400);
    expect(execNul.body.error.code).toBe('input.invalid');
    expect(JSON.stringify(execNul.body)).toMatch(/args\.cmd.*NUL/);
    const terminalNul = await call('POST', '/terminals', { cmd: 'echo a\u0000b', cols: 80, rows: 24 });
    expect(terminalNul.status, JSON.stringify(terminalNul.body)).toBe(400);
    expect(terminalNul.body.error.code).toBe('input.invalid');
    expect(JSON.stringify(terminalNul.body)).toMatch(/body\.cmd.*NUL/);
  });

  it('a path with NUL is refused with a message naming NUL, not "absolute path"', async () => {
    const stat = await call('POST', '/calls?wait=30', { tool: 'stat', args: { path: '/workspace/a\u0000b' } });
    expect(stat.status, JSON.stringify(stat.body)).toBe(400);
    expect(JSON.stringify(stat.body)).toMatch(/NUL/);
    expect(JSON.stringify(stat.body)).not.toMatch(/absolute path/);
  });
});

describe('the end of a terminal', () => {
  it('GET /terminals lists the open terminals; a deleted one is gone from the list', async () => {
    const created = await call('POST', '/terminals', { cmd: 'sleep 6501', cols: 80, rows: 24 });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.terminalId as string;
    opened.push(`/terminals/${id}`);
    const listed = await call('GET', '/terminals');
    expect(listed.status).toBe(200);
    expect(listed.body.terminals.map((t: { terminalId: string }) => t.terminalId)).toContain(id);
    await call('DELETE', `/terminals/${id}`);
    await eventually(
      async () => (await call('GET', '/terminals')).body.terminals.map((t: { terminalId: string }) => t.terminalId),
      (ids: string[]) => !ids.includes(id),
    );
  });

  it('DELETE of a terminal kills a job that left its session with setsid', async () => {
    const created = await call('POST', '/terminals', { cmd: 'setsid sleep 6201 & sleep 6202', cols: 80, rows: 24 });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    opened.push(`/terminals/${created.body.terminalId}`);
    await eventually(
      () => pgrep('^sleep 620[12]$'),
      (pids) => pids.split('\n').length === 2,
    );
    expect((await call('DELETE', `/terminals/${created.body.terminalId}`)).status).toBeLessThan(300);
    await eventually(
      () => pgrep('^sleep 620[12]$'),
      (pids) => pids === '',
    );
  });
});

/** Runs `file` with `args` to its end: exit code and stderr (stdin and stdout ignored). */
function runProgram(file: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

/** Runs `script` in the sandbox and waits until the change log has `count` changes under `dir`; the cursor before. */
async function makeChanges(script: string, dir: string, count: number): Promise<number> {
  const start = await h.client.fileChanges(leaseId);
  expect((await exec({ cmd: script })).status).toBe('succeeded');
  await eventually(
    async () => (await h.client.fileChanges(leaseId, { since: start.cursor, path: dir })).changes.length,
    (n) => n >= count,
  );
  return start.cursor;
}

describe('sbx watch, sbx changes and pipes', () => {
  it('watch --count 1 prints exactly one change, after a header naming the --since cursor', async () => {
    const since = await makeChanges(
      'mkdir -p /workspace/wc && for i in 1 2 3 4 5 6; do echo $i > /workspace/wc/f$i; done',
      '/workspace/wc',
      6,
    );
    const watched = await runCli({ url: h.url, apiKey: h.apiKey }, [
      'watch',
      leaseId,
      '/workspace/wc',
      '--since',
      String(since),
      '--count',
      '1',
    ]);
    expect(watched.code, watched.stderr).toBe(0);
    const lines = watched.stdout.trim().split('\n');
    expect(lines[0]).toBe(`# watching /workspace/wc (recursive) from cursor ${since}`);
    expect(lines.length).toBe(2);
  });

  it('a reader that stops reading (| head -1) ends sbx quietly, without an EPIPE trace', async () => {
    const since = await makeChanges(
      // Long names: more output than a pipe buffers (64 KiB), so sbx writes after head has gone.
      "mkdir -p /workspace/pipe && for i in $(seq 1 900); do : > /workspace/pipe/$(printf 'f%0200d' $i); done",
      '/workspace/pipe',
      900,
    );
    const sbx = `${process.execPath} ${join(REPO_ROOT, 'dist/cli/sbx.js')} --url ${h.url} --api-key ${h.apiKey}`;
    const piped = await runProgram('bash', ['-c', `set -o pipefail; ${sbx} changes ${leaseId} --since ${since} | head -1 >/dev/null`]);
    expect(piped.stderr).not.toMatch(/EPIPE|Error/);
    expect(piped.code).toBe(0);
  });

  it('changes without a path answers while the sandbox is paused', async () => {
    const before = await h.client.fileChanges(leaseId);
    await h.client.pauseSandbox(leaseId);
    try {
      const paused = await call('GET', `/files/changes?since=${before.cursor}`);
      expect(paused.status, JSON.stringify(paused.body)).toBe(200);
      expect(paused.body.cursor).toBeGreaterThanOrEqual(before.cursor);
    } finally {
      await h.client.resumeSandbox(leaseId);
    }
  });
});

describe('names in errors', () => {
  it("signalling the file-watch helper names it, not the agent's tool-user worker", async () => {
    const list = await call('GET', '/processes');
    const helper = (list.body.processes as Array<{ pid: number; command: string }>).find((p) => /sbx-inotify/.test(p.command));
    expect(helper, JSON.stringify(list.body.processes)).toBeDefined();
    const refused = await call('POST', `/processes/${helper!.pid}/signal`, { signal: 'SIGTERM' });
    expect(JSON.stringify(refused.body)).toMatch(/file-watch helper/);
    expect(JSON.stringify(refused.body)).not.toMatch(/tool-user worker/);
  });

  it('an unknown key of args is named args, not "args."', async () => {
    const r = await call('POST', '/calls', { tool: 'exec', args: { cmd: 'true', bogusArg: 1 } });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/args: /);
    expect(r.body.error.message).not.toMatch(/args\.: /);
  });

  it('a non-JSON text frame to a terminal is answered "must be JSON"', async () => {
    const created = await call('POST', '/terminals', { cmd: 'sleep 6601', cols: 80, rows: 24 });
    expect(created.status).toBe(201);
    opened.push(`/terminals/${created.body.terminalId}`);
    const socket = new WebSocket(`${h.url.replace(/^http/, 'ws')}/v1/sandboxes/${leaseId}/terminals/${created.body.terminalId}/ws`, {
      headers: { authorization: `Bearer ${h.apiKey}` },
    });
    try {
      const error = new Promise<Record<string, unknown>>((resolve) =>
        socket.on('message', (data: Buffer, isBinary: boolean) => {
          if (isBinary) return;
          const m = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
          if (m.type === 'error') resolve(m);
        }),
      );
      await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
      socket.send('not json at all');
      expect(await error).toMatchObject({ code: 'input.invalid', message: expect.stringMatching(/must be JSON/) });
    } finally {
      socket.close();
    }
  });

  it('auth.invalid_api_key with the key from a data dir file names that file', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'sbx-key-'));
    try {
      await writeFile(join(dataDir, 'api-key'), 'sbx_dev_not_this_planes_key\n');
      const env: NodeJS.ProcessEnv = { ...process.env, SBX_DATA_DIR: dataDir };
      delete env.SBX_API_KEY;
      const run = await runProgram(process.execPath, [join(REPO_ROOT, 'dist/cli/sbx.js'), '--url', h.url, 'ls'], env);
      expect(run.code).toBe(125);
      expect(run.stderr).toContain(join(dataDir, 'api-key'));
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
