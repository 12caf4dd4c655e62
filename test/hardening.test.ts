/**
 * Runtime hardening and resource limits of the default policy, seen from inside a real sandbox:
 * what the kernel enforces (capabilities, seccomp, CFS quota, RLIMIT_NOFILE; no-new-privileges and
 * the read-only root are in leases.test.ts),
 * and that one sandbox exhausting its limits does not stop another.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { docker, useHarness, execIn, eventually } from './fixtures/index.js';

const h = useHarness();

const exec = execIn(() => h.client, { waitSeconds: 90 });

/** Capability bits (capability.h): CAP_KILL 5, CAP_SETGID 6, CAP_SETUID 7. */
const AGENT_CAPS = (1n << 5n) | (1n << 6n) | (1n << 7n);

describe('runtime hardening (default policy)', () => {
  let leaseId: string;
  beforeAll(async () => {
    leaseId = (await h.client.createSandbox()).id;
  });

  it('the agent keeps only KILL, SETGID and SETUID; tools keep none', async () => {
    const r = await exec(leaseId, {
      cmd: "for p in $(pgrep -u 0 -f sbx-agent.cjs | head -1) self; do awk '/^CapEff/ {print $2}' /proc/$p/status; done",
    });
    const [agent, tool] = r.stdout
      .trim()
      .split('\n')
      .map((hex) => BigInt(`0x${hex}`));
    expect(agent).toBe(AGENT_CAPS);
    expect(tool).toBe(0n);
  });

  it("Docker's default seccomp profile filters the tools' syscalls: unshare(CLONE_NEWUSER) is refused, though the kernel allows it unconfined", async () => {
    const lease = await h.client.getSandbox(leaseId);
    const r = await exec(leaseId, { cmd: 'awk \'/^Seccomp:/ {print "mode", $2}\' /proc/self/status; unshare -U true 2>&1; echo "rc=$?"' });
    expect(r.stdout).toContain('mode 2\n');
    expect(r.stdout).toContain('Operation not permitted');
    expect(r.stdout).toContain('rc=1');
    // Control: the same unprivileged command in a container without seccomp succeeds, so the
    // refusal above is the profile's doing.
    const control = await docker(
      'run',
      '--rm',
      '--user',
      '1000',
      '--cap-drop',
      'ALL',
      '--network',
      'none',
      '--security-opt',
      'seccomp=unconfined',
      '--entrypoint',
      'bash',
      lease.image,
      '-c',
      'unshare -U true; echo rc=$?',
    );
    expect(control.trim()).toBe('rc=0');
  });
});

describe('resource limits (default policy: 2 CPUs, 4096 open files)', () => {
  let leaseId: string;
  beforeAll(async () => {
    leaseId = (await h.client.createSandbox()).id;
  });

  it('cpus is a CFS quota of 2 periods per period', async () => {
    const r = await exec(leaseId, {
      cmd: 'cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max',
    });
    const [quota, period] = r.stdout.trim().split(/\s+/).map(Number);
    expect(quota! / period!).toBe(2);
  });

  it('open files stop at RLIMIT_NOFILE: the 4097th descriptor is EMFILE, below it opens succeed', async () => {
    const r = await exec(leaseId, {
      cmd: `ulimit -Sn; ulimit -Hn; python3 -c "
import os
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    print('stopped', e.errno, len(fds))"`,
    });
    const [soft, hard, stopped] = r.stdout.trim().split('\n');
    expect(soft).toBe('4096');
    expect(hard).toBe('4096');
    const [, errno, opened] = stopped!.split(' ');
    expect(errno).toBe('24');
    expect(Number(opened)).toBeGreaterThan(4000);
    expect(Number(opened)).toBeLessThan(4096);
  });

  it('a fork bomb in one sandbox leaves another sandbox serving calls meanwhile', async () => {
    const other = (await h.client.createSandbox()).id;
    const bombCall = await h.client.submitCall(leaseId, 'exec', {
      cmd: 'python3 -c "import os, time\nfor i in range(5000):\n    if os.fork() == 0:\n        time.sleep(20)\n        os._exit(0)"',
      timeoutMs: 60_000,
    });
    const bomb = eventually(
      () => h.client.getCall(leaseId, bombCall.callId),
      (c) => c.status === 'finished',
      90_000,
    ).then((c) => c.result!);
    // While the bomb runs (its call started: an event, not a guessed delay), the other sandbox answers.
    for await (const e of h.client.events(leaseId, bombCall.callId)) if (e.type === 'call.started') break;
    const meanwhile = await exec(other, { argv: ['echo', 'unaffected'] });
    expect(meanwhile.stdout).toBe('unaffected\n');
    const result = await bomb;
    expect(result.error?.code).toBe('resource.pids_exhausted');
    expect((await exec(leaseId, { argv: ['echo', 'recovered'] })).stdout).toBe('recovered\n');
  });
});
