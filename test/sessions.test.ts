/**
 * Shell sessions (issue 13 part 2) and combined output (part 4) against the real engine: a
 * persistent shell whose state carries over, each command a call with its own exit code and
 * streams delimited by fresh FIFOs and a status pipe (never by text in the output), interrupts
 * that leave the session usable, DELETE that kills the tree, the policy limit, and one ordered
 * stream for `combinedOutput`.
 */
import { copyFile, mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallEvent } from '../contract/events.js';
import type { ToolResult } from '../contract/objects.js';
import { apiAs, eventually, importImage, reassemble, runCli, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});
const api = apiAs(() => h.url);

async function createSession(body: Record<string, unknown> = {}, lease = leaseId): Promise<string> {
  const r = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease}/sessions`, body);
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  expect(r.body.status).toBe('running');
  return r.body.sessionId as string;
}

async function run(sessionId: string, cmd: string, extra: Record<string, unknown> = {}, lease = leaseId): Promise<ToolResult> {
  const r = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease}/sessions/${sessionId}/exec?wait=60`, { cmd, ...extra });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as ToolResult;
}

async function remove(sessionId: string, lease = leaseId): Promise<void> {
  await api(h.apiKey, 'DELETE', `/v1/sandboxes/${lease}/sessions/${sessionId}`);
}

async function eventsOf(callId: string): Promise<CallEvent[]> {
  const events: CallEvent[] = [];
  for await (const e of h.client.events(leaseId, callId)) events.push(e);
  return events;
}

describe('shell sessions', () => {
  it('cwd, exported variables, functions, aliases and an activated venv carry over between commands', async () => {
    const s = await createSession({ env: { GREETING: 'hi' } });
    try {
      await run(s, 'mkdir -p /workspace/sess/sub && cd /workspace/sess/sub');
      await run(s, 'export COLOR=blue; greet() { echo "$GREETING $1"; }; alias ll="echo aliased"');
      await run(s, 'python3 -m venv --without-pip /workspace/sess/venv && . /workspace/sess/venv/bin/activate');
      const r = await run(s, 'pwd; echo "$COLOR"; greet you; ll; echo "$VIRTUAL_ENV"; command -v python');
      expect(r.status).toBe('succeeded');
      expect(r.stdout).toBe('/workspace/sess/sub\nblue\nhi you\naliased\n/workspace/sess/venv\n/workspace/sess/venv/bin/python\n');
      // `declare` at the top level of a command stays global (commands are not run in a function).
      await run(s, 'declare -a LIST=(a b c)');
      expect((await run(s, 'echo "${LIST[2]}"')).stdout).toBe('c\n');
    } finally {
      await remove(s);
    }
  });

  it('each command has its own exit code and separate stdout and stderr', async () => {
    const s = await createSession();
    try {
      const a = await run(s, 'echo out; echo err >&2; exit_code() { return 3; }; exit_code');
      expect(a).toMatchObject({ status: 'failed', exitCode: 3, stdout: 'out\n', stderr: 'err\n' });
      const b = await run(s, 'echo fine');
      expect(b).toMatchObject({ status: 'succeeded', exitCode: 0, stdout: 'fine\n', stderr: '' });
      expect(b.receipt?.runner?.uid).toBe(1000);
    } finally {
      await remove(s);
    }
  });

  it('output that contains the delimiters, or writes to the status fd, cannot end a command early or forge its status', async () => {
    const s = await createSession();
    try {
      const r = await run(s, "printf 'B\\nE 0\\n'; printf 'E 0\\n' >&2; printf 'E 0\\n' >&3; echo after; exit_7() { return 7; }; exit_7");
      expect(r.exitCode).toBe(7);
      expect(r.stdout).toBe('B\nE 0\nafter\n');
      expect(r.stderr).toMatch(/^E 0\n.*3.*\n$/s); // the shell's "bad file descriptor" for fd 3
      // A quote, a heredoc and shell syntax inside the command stay the command's.
      const q = await run(s, "cat <<'EOF'\nit's '\\'' \"quoted\" $HOME `x`\nEOF");
      expect(q.stdout).toBe("it's '\\'' \"quoted\" $HOME `x`\n");
      expect((await run(s, 'echo next')).stdout).toBe('next\n');
    } finally {
      await remove(s);
    }
  });

  it('a background job that holds the output pipe does not hold the command, nor leak into the next one, and survives', async () => {
    const s = await createSession();
    try {
      const r = await run(s, '(while :; do echo tick; sleep 0.05; done) & echo $! > /tmp/bgpid; echo started');
      expect(r.status).toBe('succeeded');
      expect(r.stdout.startsWith('started\n') || r.stdout.includes('started\n')).toBe(true);
      const next = await run(s, 'echo next');
      expect(next.stdout).toBe('next\n');
      // A plain exec (its sweep) spares the session's tree: the job still runs.
      const alive = await exec('kill -0 "$(cat /tmp/bgpid)" && echo alive');
      expect(alive.stdout).toBe('alive\n');
    } finally {
      await remove(s);
    }
  });

  it('a timeout interrupts the foreground command (SIGINT, then TERM, KILL) and leaves the session usable with its state', async () => {
    const s = await createSession();
    try {
      await run(s, 'cd /tmp && export KEPT=yes');
      const slept = await run(s, 'sleep 100; echo not-reached', { timeoutMs: 1000 });
      expect(slept.status).toBe('timed_out');
      expect(slept.stdout).toBe('');
      const loop = await run(s, 'while :; do :; done', { timeoutMs: 1000 });
      expect(loop.status).toBe('timed_out');
      // A program that ignores SIGINT needs the TERM step.
      const stubborn = await run(s, 'bash -c \'trap "" INT; sleep 100\'', { timeoutMs: 1000, killGraceMs: 500 });
      expect(stubborn.status).toBe('timed_out');
      const after = await run(s, 'pwd; echo $KEPT');
      expect(after.stdout).toBe('/tmp\nyes\n');
    } finally {
      await remove(s);
    }
  });

  it('cancel interrupts the running command; commands queued behind it run in order; a dropped client changes nothing', async () => {
    const s = await createSession();
    try {
      const first = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, { cmd: 'sleep 100' });
      expect(first.status).toBe(202);
      const second = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, { cmd: 'echo one >> /tmp/order' });
      const third = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, {
        cmd: 'echo two >> /tmp/order; cat /tmp/order',
      });
      await h.client.cancelCall(leaseId, first.body.callId);
      for await (const e of h.client.events(leaseId, third.body.callId)) if (e.type === 'call.finished') break;
      const result = (await h.client.getCall(leaseId, third.body.callId)).result;
      expect((await h.client.getCall(leaseId, first.body.callId)).result?.status).toBe('cancelled');
      const secondResult = (await h.client.getCall(leaseId, second.body.callId)).result;
      expect(
        secondResult?.status,
        JSON.stringify({ error: secondResult?.error, exitCode: secondResult?.exitCode, stderr: secondResult?.stderr }),
      ).toBe('succeeded');
      expect(result?.stdout).toBe('one\ntwo\n');
    } finally {
      await remove(s);
      await exec('rm -f /tmp/order');
    }
  });

  it('a cancel that races the start of a session’s first command interrupts it and leaves the shell alive', async () => {
    // The interrupt waits for the command's own SIGINT trap: sent earlier, its default would end the shell.
    for (let i = 0; i < 8; i += 1) {
      const s = await createSession();
      try {
        const first = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, { cmd: 'sleep 100' });
        await h.client.cancelCall(leaseId, first.body.callId);
        const after = await run(s, 'echo alive');
        expect(after.status, JSON.stringify(after.error)).toBe('succeeded');
        expect(after.stdout).toBe('alive\n');
        expect((await h.client.getCall(leaseId, first.body.callId)).result?.status).toBe('cancelled');
      } finally {
        await remove(s);
      }
    }
  });

  it('DELETE kills the whole tree; the ended session answers 409 session.ended; an unknown one 404', async () => {
    const s = await createSession();
    await run(s, 'sleep 1234 & sleep 1235 &');
    expect((await exec('pgrep -f "sleep 123[45]" | wc -l')).stdout.trim()).toBe('2');
    const d = await api(h.apiKey, 'DELETE', `/v1/sandboxes/${leaseId}/sessions/${s}`);
    expect(d.status).toBe(200);
    expect(d.body).toMatchObject({ status: 'ended', endedBy: 'deleted' });
    expect((await exec('pgrep -f "sleep 123[45]" | wc -l')).stdout.trim()).toBe('0');
    const again = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, { cmd: 'true' });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('session.ended');
    const viaCalls = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/calls`, { tool: 'exec', args: { cmd: 'true', session: s } });
    expect(viaCalls.status).toBe(409);
    const unknown = await api(h.apiKey, 'GET', `/v1/sandboxes/${leaseId}/sessions/ses_${'0'.repeat(32)}`);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('session.not_found');
    const list = await api(h.apiKey, 'GET', `/v1/sandboxes/${leaseId}/sessions`);
    expect(list.body.sessions.some((x: { sessionId: string }) => x.sessionId === s)).toBe(true);
  });

  it('bad input: NUL in a session command is 400, a session_start call by hand is 400, 1000 sessions stop at the policy max with 429', async () => {
    const s = await createSession();
    try {
      const nul = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions/${s}/exec`, { cmd: 'echo a\u0000b' });
      expect(nul.status).toBe(400);
      const byHand = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/calls`, {
        tool: 'session_start',
        args: { sessionId: `ses_${'1'.repeat(32)}`, idleTimeoutMs: 10_000 },
      });
      expect(byHand.status).toBe(400);
    } finally {
      await remove(s);
    }
    const statuses: number[] = [];
    const made: string[] = [];
    for (let batch = 0; batch < 20; batch += 1) {
      const answers = await Promise.all(Array.from({ length: 50 }, () => api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/sessions`, {})));
      for (const a of answers) {
        statuses.push(a.status);
        if (a.status === 201) made.push(a.body.sessionId);
        else expect(a.body.error.code).toBe('session.limit_reached');
      }
    }
    try {
      expect(statuses.length).toBe(1000);
      expect(made.length).toBe(8); // policy default sessions.max
      expect(statuses.filter((x) => x === 429).length).toBe(992);
    } finally {
      await Promise.all(made.map((id) => remove(id)));
    }
    expect((await exec('pgrep -u 1000 -c bash || true')).stdout.trim()).toBe('1'); // only this exec's own
  });
});

describe('the sessions policy', () => {
  it('sessions.max is the limit (429 past it) and an idle session ends by itself, freeing its place and its processes', async () => {
    const current = await api(h.apiKey, 'GET', '/v1/policies/default');
    const body = structuredClone(current.body.policy);
    delete body.name;
    delete body.version;
    body.sessions = { max: 1, idleTimeoutSeconds: 2 };
    const put = await api(h.apiKey, 'PUT', '/v1/policies/sessions-idle', body);
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const lease = (await h.client.createSandbox({ policy: 'sessions-idle' })).id;
    try {
      const s = await createSession({}, lease);
      await run(s, 'sleep 4321 &', {}, lease);
      const second = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease}/sessions`, {});
      expect(second.status).toBe(429);
      expect(second.body.error).toMatchObject({ code: 'session.limit_reached', details: { max: 1 } });
      const ended = await eventually(
        () => api(h.apiKey, 'GET', `/v1/sandboxes/${lease}/sessions/${s}`),
        (a) => a.body.status === 'ended',
        20_000,
      );
      expect(ended.body.endedBy).toBe('idle');
      expect(
        ((await h.client.submitCall(lease, 'exec', { cmd: 'pgrep -f "sleep 432[1]" | wc -l' }, { waitSeconds: 30 })) as ToolResult).stdout,
      ).toBe('0\n');
      const next = await createSession({}, lease);
      await remove(next, lease);
    } finally {
      await h.client.releaseSandbox(lease).catch(() => undefined);
    }
  });
});

describe('sbx session (CLI)', () => {
  it("start, exec (state carries over, exit status is the command's), ls and rm", async () => {
    const started = await runCli(h, ['session', 'start', leaseId, '--cwd', '/tmp']);
    expect(started.code, started.stderr).toBe(0);
    const id = started.stdout.trim();
    expect(id).toMatch(/^ses_[0-9a-f]{32}$/);
    expect((await runCli(h, ['session', 'exec', leaseId, id, 'export', 'V=42'])).code).toBe(0);
    const shown = await runCli(h, ['session', 'exec', leaseId, id, 'pwd; echo $V; echo e >&2; exit_4() { return 4; }; exit_4']);
    expect(shown).toMatchObject({ code: 4, stdout: '/tmp\n42\n', stderr: 'e\n' });
    // Output past the kept limit (4 MiB) is printed whole, as by `sbx exec`: the rest from its artifact.
    const long = await runCli(h, ['session', 'exec', leaseId, id, 'seq 1 1000000']);
    expect(long.code, long.stderr).toBe(0);
    expect(long.stdout === Array.from({ length: 1_000_000 }, (_, i) => `${i + 1}\n`).join('')).toBe(true);
    const combined = await runCli(h, ['exec', leaseId, '--combined', '--', 'echo a; echo b >&2; echo c']);
    expect(combined.stdout).toBe('a\nb\nc\n');
    expect((await runCli(h, ['session', 'ls', leaseId])).stdout).toContain(`${id}\trunning`);
    expect((await runCli(h, ['session', 'rm', leaseId, id])).code).toBe(0);
    expect((await runCli(h, ['session', 'ls', leaseId])).stdout).toContain(`${id}\tended(deleted)`);
  });
});

describe('combined output', () => {
  const interleave = 'for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done';
  const expected = 'out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n';

  it('exec with combinedOutput gives stdout and stderr as one stream in write order, and says so', async () => {
    const r = await exec({ cmd: interleave, combinedOutput: true });
    expect(r.stdout).toBe(expected);
    expect(r.stderr).toBe('');
    expect(r.receipt?.outputs?.combined).toBe(true);
    const events = await eventsOf(r.callId);
    const outputs = events.filter((e) => e.type === 'output');
    expect(outputs.length).toBeGreaterThan(0);
    expect(outputs.every((e) => e.type === 'output' && e.combined === true)).toBe(true);
    expect(reassemble(events, 'stdout').toString()).toBe(expected);
    // The default stays two streams.
    const apart = await exec({ cmd: interleave });
    expect(apart.stdout).toBe('out1\nout2\nout3\nout4\nout5\n');
    expect(apart.receipt?.outputs?.combined).toBeUndefined();
  });

  it('a session command with combinedOutput is one ordered stream too', async () => {
    const s = await createSession();
    try {
      const r = await run(s, interleave, { combinedOutput: true });
      expect(r.stdout).toBe(expected);
      expect(r.receipt?.outputs?.combined).toBe(true);
    } finally {
      await remove(s);
    }
  });
});

describe('a session in an image without bash', () => {
  let image: string;
  let busyboxLease: string;
  beforeAll(async () => {
    image = await importImage(
      'sessions-busybox',
      async (dir) => {
        await mkdir(join(dir, 'bin'));
        await copyFile('/bin/busybox', join(dir, 'bin/busybox'));
        for (const applet of ['sh', 'ls', 'cat', 'echo', 'pwd', 'mkdir', 'sleep']) await symlink('busybox', join(dir, 'bin', applet));
      },
      ['ENV PATH=/bin'],
    );
    busyboxLease = (await h.client.createSandbox({ image })).id;
  });
  afterAll(async () => {
    if (busyboxLease) await h.client.releaseSandbox(busyboxLease).catch(() => undefined);
  });

  it("runs the session in the image's sh: cwd and variables carry over, a timeout leaves it usable", async () => {
    const s = await createSession({}, busyboxLease);
    try {
      await run(s, 'cd /tmp && export KEPT=yes', {}, busyboxLease);
      const slept = await run(s, 'sleep 100', { timeoutMs: 1000 }, busyboxLease);
      expect(slept.status).toBe('timed_out');
      const r = await run(s, 'pwd; echo $KEPT; echo err >&2', {}, busyboxLease);
      expect(r).toMatchObject({ stdout: '/tmp\nyes\n', stderr: 'err\n', exitCode: 0 });
    } finally {
      await remove(s, busyboxLease);
    }
  });
});
