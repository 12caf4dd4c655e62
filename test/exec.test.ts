/**
 * The exec tool end to end: API → ledger → queue → agent in a real Docker sandbox → queue →
 * ledger → API. Real Docker engine, real Redis.
 */
import { describe, expect, it } from 'vitest';
import type { CallEvent } from '../contract/events.js';
import type { ToolResult } from '../contract/objects.js';
import { reassemble, useLeasedSandbox, type Harness, eventually, docker } from './fixtures/index.js';

let h: Harness;
let leaseId: string;

async function eventsOf(callId: string): Promise<CallEvent[]> {
  const events: CallEvent[] = [];
  for await (const e of h.client.events(leaseId, callId)) events.push(e);
  return events;
}

async function processesInSandbox(): Promise<string[]> {
  const r = await exec({ argv: ['ps', '-eo', 'user,pid,args', '--no-headers'] });
  // The file watch's inotify helper runs as the tool user for the agent's life (sandbox-agent/host/file-watch.ts).
  return r.stdout.split('\n').filter((l) => l.trim() && !l.includes('ps -eo') && !l.includes('/opt/sbx/bin/sbx-inotify'));
}

const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

describe('exec', () => {
  it('echo succeeds with exit 0 and exact stdout, and the receipt binds the manifest', async () => {
    const r = await exec({ argv: ['echo', 'hello sandbox'] });
    expect(r.status).toBe('succeeded');
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('hello sandbox\n');
    expect(r.stderr).toBe('');
    const lease = await h.client.getSandbox(leaseId);
    expect(r.receipt?.manifestDigest).toBe(lease.manifest?.digest);
    expect(r.receipt?.commitState).toBe('committed');
    expect(r.receipt?.runner?.uid).toBe(1000);
  });

  it('a non-zero exit is failed with the exit code and a nonzero_exit error', async () => {
    const r = await exec({ cmd: 'exit 7' });
    expect(r.status).toBe('failed');
    expect(r.exitCode).toBe(7);
    expect(r.error?.code).toBe('execution.nonzero_exit');
  });

  it('a missing command fails with 127 and the shell message on stderr', async () => {
    const r = await exec({ argv: ['no-such-command-xyz'] });
    expect(r.status).toBe('failed');
    expect(r.exitCode).toBe(127);
    expect(r.stderr).toContain('no-such-command-xyz');
    expect(r.stderr).toMatch(/not found/);
  });

  it('keeps stderr apart from stdout, each in order', async () => {
    const r = await exec({ cmd: 'for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done' });
    expect(r.stdout).toBe('out1\nout2\nout3\nout4\nout5\n');
    expect(r.stderr).toBe('err1\nerr2\nerr3\nerr4\nerr5\n');
    const events = await eventsOf(r.callId);
    expect(reassemble(events, 'stdout').toString()).toBe(r.stdout);
    expect(reassemble(events, 'stderr').toString()).toBe(r.stderr);
  });

  it('1 MB of output arrives complete and in order, in the events and in the result', async () => {
    // 100 000 numbered lines of 10 bytes each = 1 000 000 bytes.
    const r = await exec({ cmd: "seq -f '%09g' 1 100000" });
    expect(r.status).toBe('succeeded');
    const expected = Array.from({ length: 100_000 }, (_, i) => `${String(i + 1).padStart(9, '0')}\n`).join('');
    expect(r.stdout.length).toBe(1_000_000);
    expect(r.stdout).toBe(expected);
    const events = await eventsOf(r.callId);
    expect(reassemble(events, 'stdout').equals(Buffer.from(expected))).toBe(true);
    expect(r.receipt?.outputs?.stdout.bytes).toBe(1_000_000);
    const seqs = events.map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });

  it('timeoutMs ends sleep 100 as timed_out, kills the process group (grandchild included), leaves no process', async () => {
    const started = Date.now();
    const r = await exec({ cmd: 'sleep 100 & (sleep 100; echo never) & sleep 100', timeoutMs: 1000, killGraceMs: 500 });
    const elapsed = Date.now() - started;
    expect(r.status).toBe('timed_out');
    expect(r.error?.code).toBe('execution.timeout');
    expect(r.receipt?.commitState).toBe('unknown');
    expect(r.receipt?.exit?.killedBy).toBe('timeout');
    expect(elapsed).toBeLessThan(10_000);
    const left = await processesInSandbox();
    expect(left.filter((l) => l.startsWith('sandbox'))).toEqual([]);
    const events = await eventsOf(r.callId);
    expect(events.map((e) => e.type)).toContain('call.timed_out');
  });

  it('processes that left the process group (setsid, double fork) are swept when the call ends, and counted in the receipt', async () => {
    const r = await exec({ cmd: 'setsid bash -c "sleep 300" </dev/null >/dev/null 2>&1 & (setsid sleep 301 &) ; sleep 0.3; echo started' });
    expect(r.status).toBe('succeeded');
    expect(r.receipt?.cleanup?.killedProcesses).toBeGreaterThanOrEqual(2);
    expect(await processesInSandbox().then((l) => l.filter((x) => x.startsWith('sandbox')))).toEqual([]);
  });

  it("a leftover `sleep 100 &` in the call's own group is killed at the end and counted: killedProcesses is exactly 1", async () => {
    const r = await exec({ cmd: 'sleep 100 & echo started' });
    expect(r.status).toBe('succeeded');
    expect(r.receipt?.cleanup?.killedProcesses).toBe(1);
    expect(await processesInSandbox().then((l) => l.filter((x) => x.includes('sleep 100')))).toEqual([]);
  });

  it('a leftover `setsid sleep 100 &` is counted too, and a call that leaves nothing counts 0', async () => {
    const r = await exec({ cmd: 'setsid sleep 100 & echo started' });
    expect(r.status).toBe('succeeded');
    expect(r.receipt?.cleanup?.killedProcesses).toBe(1);
    expect(await processesInSandbox().then((l) => l.filter((x) => x.includes('sleep 100')))).toEqual([]);
    const clean = await exec({ cmd: 'echo nothing left' });
    expect(clean.receipt?.cleanup?.killedProcesses).toBe(0);
  });

  it('a timeout also sweeps a daemon that escaped the group', async () => {
    const r = await exec({ cmd: '(setsid sleep 777 &); sleep 100', timeoutMs: 800, killGraceMs: 200 });
    expect(r.status).toBe('timed_out');
    expect(await processesInSandbox().then((l) => l.filter((x) => x.includes('sleep 777')))).toEqual([]);
  });

  it('argv runs its program as a shell would have: PATH lookup, PWD, oom_score_adj 1000, a script without #! in the sandbox shell, 127 and 126 with the name', async () => {
    const env = await exec({ argv: ['sh', '-c', 'echo "$PWD $(cat /proc/self/oom_score_adj)"'], cwd: '/tmp' });
    expect(env.stdout).toBe('/tmp 1000\n');
    await exec({ cmd: 'printf \'[[ 1 == 1 ]] && echo bash-only syntax "$@"\\n\' > /workspace/noshebang && chmod +x /workspace/noshebang' });
    const script = await exec({ argv: ['/workspace/noshebang', 'arg'] });
    expect(script).toMatchObject({ exitCode: 0, stdout: 'bash-only syntax arg\n' });
    await exec({ cmd: "printf '#!/nonexistent\\n' > /workspace/badinterp && chmod +x /workspace/badinterp" });
    const bad = await exec({ argv: ['/workspace/badinterp'] });
    expect(bad.exitCode).toBe(126);
    expect(bad.stderr).toMatch(/badinterp: bad interpreter/);
    const missing = await exec({ argv: ['no-such-program'] });
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr).toMatch(/no-such-program: command not found/);
  });

  it('a memory hog is OOM-killed, not the agent: the call reports the signal and the sandbox keeps working', async () => {
    const adj = await exec({ cmd: 'cat /proc/self/oom_score_adj' });
    expect(adj.stdout.trim()).toBe('1000');
    const r = await exec({ cmd: 'python3 -c "x = bytearray(3 * 1024**3); print(len(x))"' });
    expect(r.status).toBe('failed');
    expect(r.signal).toBe('SIGKILL');
    expect(r.error?.code).toBe('execution.oom_killed');
    expect(r.stdout).toBe('');
    const after = await exec({ argv: ['echo', 'alive'] });
    expect(after.stdout).toBe('alive\n');
  });

  it('a fork bomb ends failed with resource.pids_exhausted and the sandbox keeps serving', async () => {
    const r = await exec({
      cmd: 'python3 -c "import os, time\nfor i in range(5000):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)"',
      timeoutMs: 60_000,
    });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('resource.pids_exhausted');
    expect(r.stderr).toMatch(/Resource temporarily unavailable|BlockingIOError/);
    expect((await exec({ argv: ['echo', 'alive'] })).stdout).toBe('alive\n');
  });

  it('filling the workspace ends failed with resource.disk_full (ENOSPC from the size-limited root)', async () => {
    const r = await exec({ cmd: 'dd if=/dev/zero of=/workspace/fill bs=1M count=2000 status=none; s=$?; rm -f /workspace/fill; exit $s' });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('resource.disk_full');
    expect(r.stderr).toContain('No space left on device');
    expect((await exec({ argv: ['echo', 'alive'] })).stdout).toBe('alive\n');
  });

  it('a cwd the tool user may not enter fails before anything runs, naming the path', async () => {
    const r = await exec({ argv: ['pwd'], cwd: '/run/sbx/agent' });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('input.cwd_not_found');
    expect(r.error?.message).toContain('EACCES');
    expect(r.receipt?.commitState).toBe('not_started');
  });

  it('a script longer than execve allows for one argument is refused with input.invalid, not left hanging', async () => {
    await expect(h.client.submitCall(leaseId, 'exec', { cmd: `echo ${'A'.repeat(200_000)}` })).rejects.toMatchObject({
      status: 400,
      code: 'input.invalid',
    });
  });

  it('a program that ignores SIGTERM is killed with SIGKILL after the grace period', async () => {
    const r = await exec({ cmd: "trap '' TERM; sleep 100", timeoutMs: 500, killGraceMs: 300 });
    expect(r.status).toBe('timed_out');
    expect(await processesInSandbox().then((l) => l.filter((x) => x.startsWith('sandbox')))).toEqual([]);
  });

  it('env values with spaces, quotes, $, newlines and non-ASCII arrive byte-exact', async () => {
    const value = `a b "c" 'd' $HOME \\ \n tab\t ünïcødé 🚀`;
    const r = await exec({ argv: ['printenv', 'WEIRD'], env: { WEIRD: value } });
    expect(r.stdout).toBe(`${value}\n`);
    expect(r.receipt?.environment?.keys).toContain('WEIRD');
    expect(r.receipt?.environment?.defaults).toMatchObject({ NO_COLOR: '1', TERM: 'dumb', GIT_TERMINAL_PROMPT: '0', PAGER: 'cat' });
  });

  it('a heredoc in cmd works and stdin is delivered', async () => {
    const r = await exec({ cmd: "cat <<'EOF'\nline one\n$NOT_EXPANDED\nEOF\ncat", stdin: 'from stdin' });
    expect(r.stdout).toBe('line one\n$NOT_EXPANDED\nfrom stdin');
  });

  it('a missing cwd fails before anything runs', async () => {
    const r = await exec({ argv: ['true'], cwd: '/workspace/does-not-exist' });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('input.cwd_not_found');
    expect(r.receipt?.commitState).toBe('not_started');
  });

  it('without wait the call answers 202 at once, and the SSE stream resumes after Last-Event-ID exactly once each', async () => {
    const pending = await h.client.submitCall(leaseId, 'exec', { cmd: 'for i in 1 2 3; do echo $i; sleep 0.1; done' });
    expect('receipt' in pending).toBe(false);
    const all = await eventsOf(pending.callId);
    expect(all[0]?.type).toBe('call.accepted');
    expect(all.at(-1)?.type).toBe('call.finished');
    const cut = 3;
    const resumed: CallEvent[] = [];
    for await (const e of h.client.events(leaseId, pending.callId, cut)) resumed.push(e);
    expect(resumed.map((e) => e.seq)).toEqual(all.filter((e) => e.seq > cut).map((e) => e.seq));
    expect(resumed).toEqual(all.slice(cut));
  });

  it('resubmitting the same callId returns the same call and runs it once; other args conflict', async () => {
    const callId = `once-${Date.now()}`;
    const args = { cmd: 'echo ran >> /workspace/once.log; cat /workspace/once.log | wc -l' };
    const first = (await h.client.submitCall(leaseId, 'exec', args, { callId, waitSeconds: 30 })) as ToolResult;
    const second = (await h.client.submitCall(leaseId, 'exec', args, { callId, waitSeconds: 30 })) as ToolResult;
    expect(second.receipt?.receiptId).toBe(first.receipt?.receiptId);
    const count = await exec({ cmd: 'wc -l < /workspace/once.log' });
    expect(count.stdout.trim()).toBe('1');
    await expect(h.client.submitCall(leaseId, 'exec', { cmd: 'echo other' }, { callId })).rejects.toMatchObject({
      code: 'call.id_conflict',
      status: 409,
    });
  });

  it('cancel kills a running call: cancelled, unknown effect, no process left', async () => {
    const pending = await h.client.submitCall(leaseId, 'exec', { cmd: 'sleep 60 & sleep 60' });
    for await (const e of h.client.events(leaseId, pending.callId)) if (e.type === 'call.started') break;
    await h.client.cancelCall(leaseId, pending.callId);
    const events = [];
    for await (const e of h.client.events(leaseId, pending.callId)) events.push(e.type);
    const call = await h.client.getCall(leaseId, pending.callId);
    expect(call.result?.status).toBe('cancelled');
    expect(call.result?.receipt?.commitState).toBe('unknown');
    expect(events).toContain('call.cancel_requested');
    expect(events).toContain('call.cancel_acknowledged');
    expect(await processesInSandbox().then((l) => l.filter((x) => x.startsWith('sandbox')))).toEqual([]);
  });

  it('background: answers detached with a task handle at once; output streams on; the call finishes when the process ends', async () => {
    const detached = (await h.client.submitCall(
      leaseId,
      'exec',
      { cmd: 'for i in 1 2 3; do echo tick $i; sleep 0.2; done', background: true },
      { waitSeconds: 30 },
    )) as ToolResult;
    expect(detached.status).toBe('detached');
    expect(detached.data).toMatchObject({ taskId: detached.callId });
    const running = await h.client.getCall(leaseId, detached.callId);
    expect(['detached', 'finished']).toContain(running.status);
    const events = await eventsOf(detached.callId);
    const types = events.map((e) => e.type);
    expect(types.indexOf('call.detached')).toBeLessThan(types.indexOf('call.finished'));
    expect(reassemble(events, 'stdout').toString()).toBe('tick 1\ntick 2\ntick 3\n');
    const done = await h.client.getCall(leaseId, detached.callId);
    expect(done.status).toBe('finished');
    expect(done.result?.status).toBe('succeeded');
    expect(done.result?.stdout).toBe('tick 1\ntick 2\ntick 3\n');
    expect(done.detached?.status).toBe('detached');
  });

  it('a background task survives the calls after it and their sweeps, and ends with its own cancel', async () => {
    const task = (await h.client.submitCall(leaseId, 'exec', { cmd: 'sleep 60', background: true }, { waitSeconds: 30 })) as ToolResult;
    expect(task.status).toBe('detached');
    const other = await exec({ cmd: 'setsid sleep 99 & sleep 0.3; echo done' });
    expect(other.status).toBe('succeeded');
    expect(other.receipt?.cleanup?.killedProcesses).toBeGreaterThanOrEqual(1);
    expect((await processesInSandbox()).some((l) => l.includes('sleep 60'))).toBe(true);
    await h.client.cancelCall(leaseId, task.callId);
    for await (const e of h.client.events(leaseId, task.callId)) if (e.type === 'call.finished') break;
    const ended = await h.client.getCall(leaseId, task.callId);
    expect(ended.result?.status).toBe('cancelled');
    expect((await processesInSandbox()).some((l) => l.includes('sleep 60'))).toBe(false);
  });

  it('cancel of a running call that ignores SIGTERM and double-forks a daemon: TERM, grace, KILL, sweep; nothing left', async () => {
    const pending = await h.client.submitCall(leaseId, 'exec', { cmd: "trap '' TERM; (setsid sleep 555 &); sleep 60", killGraceMs: 300 });
    for await (const e of h.client.events(leaseId, pending.callId)) if (e.type === 'call.started') break;
    // The daemon has forked away before the cancel: seen from the host (an exec call would queue behind this one).
    await eventually(
      () => docker('top', `sbx-${leaseId}`, '-eo', 'pid,args'),
      (out) => out.includes('sleep 555'),
      10_000,
    );
    await h.client.cancelCall(leaseId, pending.callId);
    const types: string[] = [];
    for await (const e of h.client.events(leaseId, pending.callId)) types.push(e.type);
    expect(types.indexOf('call.cancel_requested')).toBeLessThan(types.indexOf('call.cancel_acknowledged'));
    const call = await h.client.getCall(leaseId, pending.callId);
    expect(call.result?.status).toBe('cancelled');
    expect(call.result?.receipt?.exit?.killedBy).toBe('cancel');
    expect(call.result?.receipt?.cleanup?.killedProcesses).toBeGreaterThanOrEqual(1);
    expect((await processesInSandbox()).filter((l) => l.startsWith('sandbox'))).toEqual([]);
  });

  it('calls above the policy timeout are denied with policy.tool_denied and recorded', async () => {
    const callId = `denied-${Date.now()}`;
    await expect(h.client.submitCall(leaseId, 'exec', { argv: ['true'], timeoutMs: 24 * 3600 * 1000 }, { callId })).rejects.toMatchObject({
      code: 'policy.tool_denied',
      status: 403,
    });
    const call = await h.client.getCall(leaseId, callId);
    expect(call.result?.status).toBe('denied');
  });
});
