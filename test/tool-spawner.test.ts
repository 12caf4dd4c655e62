/**
 * Exec calls' programs start from the agent's spawn server (`sbx-exec --serve`,
 * sandbox-agent/host/tool-spawner.ts), in a real sandbox: as its children, each in its own
 * session, as the tool user, with pipes for stdio. When the server dies during a call, that call
 * ends `effect_unknown` once its program is gone (its exit status went with the server), and the
 * calls after it start from the agent instead.
 */
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { docker, useLeasedSandbox, type Harness } from './fixtures/index.js';

const SERVER_COMMAND = '/opt/sbx/bin/sbx-exec --serve';

let h: Harness;
let leaseId: string;

const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

/** The command line of the calling program's parent, its session id and pid, its uid, and what its stdio are. */
const PARENT_AND_STDIO = [
  'tr "\\0" " " < /proc/$PPID/cmdline; echo',
  "cut -d' ' -f6 /proc/$$/stat",
  'echo $$',
  'id -u',
  'stat -L -c %F /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2',
].join('; ');

describe('spawn server', () => {
  it('starts an exec program as its child, in a session of its own, as the tool user, with pipes as stdin, stdout and stderr', async () => {
    const r = await exec({ argv: ['sh', '-c', PARENT_AND_STDIO] });
    expect(r.status, r.stderr).toBe('succeeded');
    const [parent, sid, pid, uid, ...rest] = r.stdout.trimEnd().split('\n');
    expect(parent!.trim()).toBe(SERVER_COMMAND);
    expect(sid).toBe(pid);
    expect(Number(uid)).toBe(r.receipt?.runner?.uid);
    expect(Number(uid)).not.toBe(0);
    expect(rest).toEqual(['fifo', 'fifo', 'fifo']);
  });

  it('names the signal that killed a program as Node does (SIGABRT, not its alias SIGIOT), and an unnamed one by its number', async () => {
    const aborted = await exec({ cmd: 'kill -ABRT $$' });
    expect(aborted.receipt?.exit?.signal).toBe('SIGABRT');
    const realtime = await exec({ cmd: 'kill -35 $$' });
    expect(realtime.status).toBe('failed');
    expect(realtime.receipt?.exit?.signal).toBe('SIG35');
  });

  it('refuses an environment longer than execve takes as spawn_failed: nothing ran', async () => {
    const env = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`BIG_${i}`, 'x'.repeat(100 * 1024)]));
    const r = await exec({ argv: ['true'], env });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('execution.spawn_failed');
    expect(r.error?.message).toContain('E2BIG');
    expect(r.receipt?.commitState).toBe('not_started');
  });

  it('closes a call\'s stdin with its process: calls with stdin "pipe" left open leave no descriptor behind in the agent', async () => {
    const agentFds = async (): Promise<number> =>
      Number(await docker('exec', `sbx-${leaseId}`, 'sh', '-c', "ls /proc/$(pgrep -f 'sbx-agent.cjs$')/fd | wc -l"));
    await exec({ argv: ['true'], stdin: 'pipe' });
    const before = await agentFds();
    for (let i = 0; i < 20; i += 1) expect((await exec({ argv: ['true'], stdin: 'pipe' })).status).toBe('succeeded');
    expect(await agentFds()).toBeLessThan(before + 5);
  });

  it('a tool-user process that stops every start (kill -STOP -1) makes a call fail to start after the deadline, not hang the sandbox', async () => {
    const attacker = (await h.client.submitCall(
      leaseId,
      'exec',
      { cmd: 'while :; do kill -STOP -1 2>/dev/null; done', background: true },
      { waitSeconds: 30 },
    )) as ToolResult;
    expect(attacker.status).toBe('detached');
    try {
      // The loop must catch a start between the drop to the tool user and the exec; a PATH of 3000
      // missing directories, each looked in first, widens that to milliseconds. A start it misses
      // runs (and ends, or is stopped after its exec and times out).
      const PATH = [...Array.from({ length: 3000 }, (_, i) => `/no/such/dir/${i}`), '/usr/bin', '/bin'].join(':');
      let stopped: ToolResult | undefined;
      for (let attempt = 0; attempt < 200 && !stopped; attempt += 1) {
        const r = await exec({ argv: ['true'], env: { PATH }, timeoutMs: 2000, killGraceMs: 100 });
        if (r.status === 'succeeded' || r.status === 'timed_out') continue;
        stopped = r;
      }
      expect(stopped?.status).toBe('failed');
      expect(stopped?.error?.code).toBe('execution.spawn_failed');
      expect(stopped?.error?.message).toContain('ETIMEDOUT');
      expect(stopped?.receipt?.commitState).toBe('not_started');
    } finally {
      await h.client.cancelCall(leaseId, attacker.callId);
      for await (const e of h.client.events(leaseId, attacker.callId)) if (e.type === 'call.finished') break;
    }
    expect((await exec({ argv: ['echo', 'served'] })).stdout).toBe('served\n');
  });

  it('when the server is killed during a call, that call ends effect_unknown after its program, and the next starts from the agent', async () => {
    const pending = await h.client.submitCall(leaseId, 'exec', { cmd: 'sleep 1; echo slept' });
    for await (const e of h.client.events(leaseId, pending.callId)) if (e.type === 'call.started') break;
    const serverPid = (await docker('exec', `sbx-${leaseId}`, 'pgrep', '-f', `^${SERVER_COMMAND}$`)).trim();
    expect(serverPid).toMatch(/^\d+$/);
    await docker('exec', `sbx-${leaseId}`, 'kill', '-KILL', serverPid);
    for await (const e of h.client.events(leaseId, pending.callId)) if (e.type === 'call.finished') break;
    const call = await h.client.getCall(leaseId, pending.callId);
    expect(call.result?.status).toBe('effect_unknown');
    expect(call.result?.error?.code).toBe('execution.effect_unknown');
    expect(call.result?.receipt?.commitState).toBe('unknown');
    // Its program ran to its end meanwhile: the output it wrote is in the result.
    expect(call.result?.stdout).toBe('slept\n');

    const next = await exec({ argv: ['sh', '-c', PARENT_AND_STDIO] });
    expect(next.status, next.stderr).toBe('succeeded');
    expect(next.stdout.split('\n')[0]).toContain('/opt/sbx/agent/sbx-agent.cjs');
  });
});
