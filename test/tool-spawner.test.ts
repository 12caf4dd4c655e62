/**
 * Exec calls' programs start from the agent's spawn server (`sbx-exec --serve`,
 * sandbox-agent/host/tool-spawner.ts), in a real sandbox: as its children, each in its own
 * session, as the tool user, with pipes for stdio. When the server dies during a call, that call
 * ends `effect_unknown` once its program is gone (its exit status went with the server), and the
 * calls after it start from the agent instead.
 */
import { describe, expect, it } from 'vitest';
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
