/**
 * Where a machine's CPU went over a window: the control plane, the Redis server, the sandboxes
 * (each container's cgroup: its agent and every tool process it ran), the bench's own process
 * (the API client), and everything else (dockerd, containerd, the kernel's own work, any other
 * process of the host). A rate figure on a 2-core machine is bounded by the sum; the split says
 * which part would have to shrink for it to rise. Read from the host's /proc and cgroup files
 * (proc(5), cgroups(7)): the bench runs on the Docker host (as deploy/local does).
 */
import { readFile } from 'node:fs/promises';
import { parseMountinfo } from '../control-plane/runtime/mountinfo.js';
import { clockTicksPerSecond, cpuTimeMsOf } from './procfs.js';

/** A window's split. Wall time and CPU time in ms; a party's CPU time is user + system. */
export interface CpuSplit {
  /** Wall time of the window. */
  elapsedMs: number;
  /** Busy time of every CPU of the machine together (/proc/stat: user, nice, system, irq, softirq). */
  machineMs: number;
  /** The control-plane process. */
  planeMs: number;
  /** The Redis server's process; NaN when it is not a process of this machine. */
  redisMs: number;
  /** The cgroups of the sandboxes that could be read (`sandboxesRead` of `sandboxesTotal`). */
  sandboxesMs: number;
  sandboxesRead: number;
  sandboxesTotal: number;
  /** The bench's own process (the API client, the baselines' dockerode). */
  clientMs: number;
  /** machineMs less the parties read (at least 0: per-process times count in 10 ms clock ticks). */
  otherMs: number;
}

/**
 * Busy CPU time of the whole machine since boot, ms, from the text of /proc/stat: user, nice,
 * system, irq and softirq. Not idle nor iowait, nor steal (time the hypervisor gave to others);
 * guest time is inside user already. Throws on text without a `cpu ` line.
 */
export function machineBusyMsOfStat(stat: string, ticksPerSecond: number): number {
  const line = stat.split('\n').find((l) => l.startsWith('cpu '));
  if (!line) throw new Error('no "cpu " line in /proc/stat');
  const [user, nice, system, , , irq, softirq] = line.trim().split(/\s+/).slice(1).map(Number);
  return (((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0)) * 1000) / ticksPerSecond;
}

/** A cgroup's CPU usage file: v1's `cpuacct.usage` (ns) or v2's `cpu.stat` (`usage_usec`). */
export interface CpuUsageFile {
  path: string;
  kind: 'v1' | 'v2';
}

/**
 * The CPU usage file of the cgroup a process is in, from the text of its /proc/<pid>/cgroup
 * (`id:controllers:path`; a path may hold `:`) and of /proc/self/mountinfo, which says where
 * each hierarchy is mounted (the v1 one whose super options name `cpuacct`, or the cgroup2 one)
 * and at which root. v1's cpuacct is preferred; null when neither is mounted or named.
 */
export function cpuUsageFileOf(procCgroup: string, mountinfo: string): CpuUsageFile | null {
  const memberships = procCgroup
    .split('\n')
    .map((line) => /^(\d+):([^:]*):(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ controllers: m[2]!.split(','), path: m[3]! }));
  const mounts = parseMountinfo(mountinfo).filter((m) => m.fstype === 'cgroup' || m.fstype === 'cgroup2');
  const under = (mount: { root: string; mountPoint: string }, path: string): string | null => {
    if (mount.root !== '/' && !path.startsWith(mount.root)) return null;
    return `${mount.mountPoint}${mount.root === '/' ? path : path.slice(mount.root.length)}`.replace(/\/$/, '');
  };
  const v1 = memberships.find((m) => m.controllers.includes('cpuacct'));
  const v1Mount = mounts.find((m) => m.fstype === 'cgroup' && m.superOptions.includes('cpuacct'));
  const v1Dir = v1 && v1Mount ? under(v1Mount, v1.path) : null;
  if (v1Dir !== null) return { path: `${v1Dir}/cpuacct.usage`, kind: 'v1' };
  const v2 = memberships.find((m) => m.controllers.length === 1 && m.controllers[0] === '');
  const v2Mount = mounts.find((m) => m.fstype === 'cgroup2');
  const v2Dir = v2 && v2Mount ? under(v2Mount, v2.path) : null;
  return v2Dir === null ? null : { path: `${v2Dir}/cpu.stat`, kind: 'v2' };
}

/** CPU time of a cgroup's usage file, ms. Rejects when it cannot be read. */
async function cgroupCpuMs(file: CpuUsageFile): Promise<number> {
  const text = await readFile(file.path, 'utf8');
  if (file.kind === 'v1') return Number(text.trim()) / 1e6;
  return Number(/^usage_usec (\d+)/m.exec(text)?.[1] ?? NaN) / 1000;
}

/** CPU time this process (the bench) has used, ms. */
function clientCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/**
 * Starts a window: reads every party's CPU time now, and returns the function that reads them
 * again and returns the split. `sandboxPids`: one process of each sandbox (its agent), whose
 * cgroup is the sandbox's (one whose cgroup cannot be found or read, at either end, is left out
 * and counted in `sandboxesRead`); `redisPid` null: the Redis server is not a process of this
 * machine (its time is in `otherMs`).
 */
export async function startCpuSplit(parties: {
  planePid: number;
  redisPid: number | null;
  sandboxPids: number[];
}): Promise<() => Promise<CpuSplit>> {
  const hz = clockTicksPerSecond();
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const files = await Promise.all(
    parties.sandboxPids.map(async (pid) => cpuUsageFileOf(await readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => ''), mountinfo)),
  );
  const read = async () => ({
    at: performance.now(),
    machine: machineBusyMsOfStat(await readFile('/proc/stat', 'utf8'), hz),
    plane: await cpuTimeMsOf(parties.planePid),
    redis: parties.redisPid === null ? NaN : await cpuTimeMsOf(parties.redisPid),
    sandboxes: await Promise.all(files.map((f) => (f ? cgroupCpuMs(f).catch(() => NaN) : NaN))),
    client: clientCpuMs(),
  });
  const before = await read();
  return async () => {
    const after = await read();
    const sandboxes = after.sandboxes.map((v, i) => v - before.sandboxes[i]!).filter(Number.isFinite);
    const split = {
      elapsedMs: after.at - before.at,
      machineMs: after.machine - before.machine,
      planeMs: after.plane - before.plane,
      redisMs: after.redis - before.redis,
      sandboxesMs: sandboxes.reduce((a, b) => a + b, 0),
      sandboxesRead: sandboxes.length,
      sandboxesTotal: files.length,
      clientMs: after.client - before.client,
    };
    const parties = [split.planeMs, split.redisMs, split.sandboxesMs, split.clientMs].filter(Number.isFinite);
    return { ...split, otherMs: Math.max(0, split.machineMs - parties.reduce((a, b) => a + b, 0)) };
  };
}

/**
 * One line: each party's share of the machine's busy time and its CPU ms per `per.count` units
 * of work, `units` being the units the window did (e.g. 846 calls, per 1,000 calls). A party not
 * read is named so (its time is then in "everything else"); with no units, shares alone.
 */
export function describeCpuSplit(split: CpuSplit, units: number, per: { count: number; name: string }): string {
  const share = (v: number): string => `${((100 * v) / split.machineMs).toFixed(0)}%`;
  const perUnit = (v: number): string => (units > 0 ? ` (${((v * per.count) / units).toFixed(0)} ms per ${per.name})` : '');
  const cores = (split.machineMs / split.elapsedMs).toFixed(2);
  const partial = split.sandboxesRead < split.sandboxesTotal ? `, ${split.sandboxesRead} of ${split.sandboxesTotal} read` : '';
  const parts: Array<[string, number]> = [
    ['control plane', split.planeMs],
    ['Redis', split.redisMs],
    [`sandboxes (agents and their tools${partial})`, split.sandboxesRead === 0 ? NaN : split.sandboxesMs],
    ['bench client', split.clientMs],
    ['everything else (engine, kernel, other processes)', split.otherMs],
  ];
  return `CPU over the window: ${cores} cores busy; ${parts
    .map(([name, v]) => (Number.isFinite(v) ? `${name} ${share(v)}${perUnit(v)}` : `${name} not read`))
    .join(', ')}`;
}
