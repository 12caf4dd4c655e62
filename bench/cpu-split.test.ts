import { describe, expect, it } from 'vitest';
import { cpuUsageFileOf, describeCpuSplit, machineBusyMsOfStat } from './cpu-split.js';

describe('the CPU split of a bench window', () => {
  it('counts busy time from /proc/stat as all but idle and iowait, in ms at the given tick rate', () => {
    const stat = 'cpu  100 20 30 5000 40 1 2 3 7 0\ncpu0 50 10 15 2500 20 0 1 1 0 0\nintr 1 2\n';
    // user 100 + nice 20 + system 30 + irq 1 + softirq 2 + steal 3 = 156 ticks; guest (7) is inside user already.
    expect(machineBusyMsOfStat(stat, 100)).toBe(1560);
    expect(() => machineBusyMsOfStat('intr 1 2\n', 100)).toThrow(/cpu/);
  });

  it("finds a process's CPU usage file under cgroup v1 (cpuacct, also when joined with cpu) and under v2", () => {
    const v1 = '12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/containerd.service\n';
    expect(cpuUsageFileOf(v1)).toEqual({ path: '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpuacct.usage', kind: 'v1' });
    expect(cpuUsageFileOf('0::/system.slice/docker-abc.scope\n')).toEqual({
      path: '/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.stat',
      kind: 'v2',
    });
    expect(cpuUsageFileOf('')).toBeNull();
  });

  it("names each party's share of the busy time and its CPU per unit of work, the rest being what no party took", () => {
    const line = describeCpuSplit(
      { elapsedMs: 1000, machineMs: 2000, planeMs: 500, redisMs: 300, sandboxesMs: 800, clientMs: 200, otherMs: 200 },
      100,
      { count: 1000, name: '1,000 calls' },
    );
    expect(line).toBe(
      'CPU over the window: 2.00 cores busy; control plane 25% (5000 ms per 1,000 calls), Redis 15% (3000 ms per 1,000 calls), ' +
        'sandboxes (agents and their tools) 40% (8000 ms per 1,000 calls), bench client 10% (2000 ms per 1,000 calls), ' +
        'rest of the machine (engine, kernel) 10% (2000 ms per 1,000 calls)',
    );
    const elsewhere = describeCpuSplit(
      { elapsedMs: 1000, machineMs: 2000, planeMs: 500, redisMs: NaN, sandboxesMs: 800, clientMs: 200, otherMs: 500 },
      100,
      { count: 1000, name: '1,000 calls' },
    );
    expect(elsewhere).toContain('Redis not read,');
    expect(elsewhere).toContain('rest of the machine (engine, kernel) 25% (5000 ms per 1,000 calls)');
  });
});
