import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cpuUsageFileOf, describeCpuSplit, machineBusyMsOfStat, type CpuSplit } from './cpu-split.js';

/** Mount lines as /proc/self/mountinfo writes them. */
const mount = (root: string, at: string, fstype: string, superOptions: string): string =>
  `30 25 0:26 ${root} ${at} rw,nosuid,nodev,noexec,relatime shared:9 - ${fstype} ${fstype} ${superOptions}`;

describe('the CPU split of a bench window', () => {
  it('counts busy time from /proc/stat as user, nice, system, irq and softirq, in ms at the given tick rate', () => {
    const stat = 'cpu  100 20 30 5000 40 1 2 3 7 0\ncpu0 50 10 15 2500 20 0 1 1 0 0\nintr 1 2\n';
    // Not idle (5000), iowait (40) nor steal (3); guest (7) is inside user already: 153 ticks.
    expect(machineBusyMsOfStat(stat, 100)).toBe(1530);
    expect(() => machineBusyMsOfStat('intr 1 2\n', 100)).toThrow(/cpu/);
  });

  it("finds a process's CPU usage file where mountinfo says its hierarchy is mounted: v1 cpuacct alone or joined, v2, hybrid", () => {
    const cgroup = '12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/x.service\n';
    const joined = [
      mount('/', '/sys/fs/cgroup/cpu,cpuacct', 'cgroup', 'rw,cpu,cpuacct'),
      mount('/', '/sys/fs/cgroup/unified', 'cgroup2', 'rw'),
    ];
    expect(cpuUsageFileOf(cgroup, joined.join('\n'))).toEqual({ path: '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpuacct.usage', kind: 'v1' });
    const apart = mount('/', '/sys/fs/cgroup/cpuacct', 'cgroup', 'rw,cpuacct');
    expect(cpuUsageFileOf('2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n', apart)).toEqual({
      path: '/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage',
      kind: 'v1',
    });
    // Hybrid without a v1 cpuacct: the cgroup2 mount, wherever it is.
    expect(cpuUsageFileOf('1:name=systemd:/x\n0::/docker/abc\n', joined[1]!)).toEqual({
      path: '/sys/fs/cgroup/unified/docker/abc/cpu.stat',
      kind: 'v2',
    });
    expect(cpuUsageFileOf('0::/system.slice/docker-abc.scope\n', mount('/', '/sys/fs/cgroup', 'cgroup2', 'rw'))).toEqual({
      path: '/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.stat',
      kind: 'v2',
    });
    expect(cpuUsageFileOf('', joined.join('\n'))).toBeNull();
    expect(cpuUsageFileOf(cgroup, '')).toBeNull();
  });

  it("keeps a cgroup path's colons, and takes a mount's own root off the path (a hierarchy mounted from below its top)", () => {
    const v2 = mount('/kubepods', '/sys/fs/cgroup', 'cgroup2', 'rw');
    expect(cpuUsageFileOf('0::/kubepods/pod:a:b/c\n', v2)).toEqual({ path: '/sys/fs/cgroup/pod:a:b/c/cpu.stat', kind: 'v2' });
    expect(cpuUsageFileOf('0::/elsewhere/c\n', v2)).toBeNull();
  });

  it('finds a readable usage file for this very process on this machine', () => {
    const file = cpuUsageFileOf(readFileSync('/proc/self/cgroup', 'utf8'), readFileSync('/proc/self/mountinfo', 'utf8'));
    expect(file).not.toBeNull();
    expect(Number.isFinite(Number(/\d+/.exec(readFileSync(file!.path, 'utf8'))?.[0]))).toBe(true);
  });

  const split: CpuSplit = {
    elapsedMs: 1000,
    machineMs: 2000,
    planeMs: 500,
    redisMs: 300,
    sandboxesMs: 800,
    sandboxesRead: 20,
    sandboxesTotal: 20,
    clientMs: 200,
    otherMs: 200,
  };

  it("names each party's share of the busy time and its CPU per unit of work, the rest being what no party took", () => {
    expect(describeCpuSplit(split, 100, { count: 1000, name: '1,000 calls' })).toBe(
      'CPU over the window: 2.00 cores busy; control plane 25% (5000 ms per 1,000 calls), Redis 15% (3000 ms per 1,000 calls), ' +
        'sandboxes (agents and their tools) 40% (8000 ms per 1,000 calls), bench client 10% (2000 ms per 1,000 calls), ' +
        'everything else (engine, kernel, other processes) 10% (2000 ms per 1,000 calls)',
    );
  });

  it('says which party was not read and how many sandboxes were, and gives shares alone when the window did no work', () => {
    const partly = describeCpuSplit({ ...split, redisMs: NaN, sandboxesRead: 19, otherMs: 500 }, 100, { count: 1000, name: '1,000 calls' });
    expect(partly).toContain('Redis not read,');
    expect(partly).toContain('sandboxes (agents and their tools, 19 of 20 read) 40%');
    expect(partly).toContain('everything else (engine, kernel, other processes) 25% (5000 ms per 1,000 calls)');
    expect(describeCpuSplit({ ...split, sandboxesRead: 0 }, 100, { count: 1000, name: 'x' })).toContain('0 of 20 read) not read');
    const idle = describeCpuSplit(split, 0, { count: 1000, name: '1,000 calls' });
    expect(idle).toContain('control plane 25%,');
    expect(idle).not.toMatch(/NaN|Infinity|not read/);
  });
});
