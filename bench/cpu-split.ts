/**
 * Where a machine's CPU went over a window: the control plane, the Redis server, the sandboxes
 * (each container's cgroup: its agent and every tool process it ran), the bench's own process
 * (the API client), and the rest of the machine (dockerd, containerd, the kernel's own work).
 * A rate figure on a 2-core machine is bounded by the sum; the split says which part would have
 * to shrink for it to rise. Read from the host's /proc and cgroup files (proc(5), cgroups(7)):
 * the bench runs on the Docker host (as deploy/local does).
 */
import { readFile } from 'node:fs/promises';
import { clockTicksPerSecond, cpuTimeMsOf } from './procfs.js';

/** CPU milliseconds each party used over the window (user + system). */
export interface CpuSplit {
  elapsedMs: number;
  /** Every CPU of the machine, busy time (all of /proc/stat's first line but idle and iowait). */
  machineMs: number;
  planeMs: number;
  redisMs: number;
  /** The sandboxes' cgroups together; NaN when a cgroup could not be read. */
  sandboxesMs: number;
  clientMs: number;
  /** machineMs less the parties above. */
  otherMs: number;
}

/** Busy CPU time of the whole machine since boot, ms, from the text of /proc/stat. Throws on text without a `cpu ` line. */
export function machineBusyMsOfStat(stat: string, ticksPerSecond: number): number {
  const line = stat.split('\n').find((l) => l.startsWith('cpu '));
  if (!line) throw new Error('no "cpu " line in /proc/stat');
  // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is counted in user already.
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return (((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) * 1000) / ticksPerSecond;
}

/**
 * The CPU usage file of the cgroup `pid` is in, from the text of /proc/<pid>/cgroup: cgroup v1's
 * `cpuacct.usage` (ns) or v2's `cpu.stat` (`usage_usec`). Null when neither is named.
 */
export function cpuUsageFileOf(procCgroup: string): { path: string; kind: 'v1' | 'v2' } | null {
  for (const line of procCgroup.split('\n')) {
    const [, controllers, path] = line.split(':');
    if (path === undefined || controllers === undefined) continue;
    if (controllers.split(',').includes('cpuacct')) return { path: `/sys/fs/cgroup/${controllers}${path}/cpuacct.usage`, kind: 'v1' };
  }
  const unified = procCgroup.split('\n').find((l) => l.startsWith('0::'));
  return unified ? { path: `/sys/fs/cgroup${unified.slice(3)}/cpu.stat`, kind: 'v2' } : null;
}

/** CPU time of a cgroup's usage file (cpuUsageFileOf), ms. */
async function cgroupCpuMs(file: { path: string; kind: 'v1' | 'v2' }): Promise<number> {
  const text = await readFile(file.path, 'utf8');
  if (file.kind === 'v1') return Number(text.trim()) / 1e6;
  return Number(/^usage_usec (\d+)/m.exec(text)?.[1] ?? NaN) / 1000;
}

function clientCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/**
 * Starts a window: reads every party's CPU time now; `end()` reads again and returns the split.
 * `sandboxPids`: one process of each sandbox (its agent), whose cgroup is the sandbox's; `redisPid`
 * null: the Redis server is not a process of this machine (its share is NaN, counted in the rest).
 */
export async function startCpuSplit(parties: {
  planePid: number;
  redisPid: number | null;
  sandboxPids: number[];
}): Promise<() => Promise<CpuSplit>> {
  const hz = clockTicksPerSecond();
  const files = await Promise.all(
    parties.sandboxPids.map(async (pid) => cpuUsageFileOf(await readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => ''))),
  );
  const read = async () => ({
    at: performance.now(),
    machine: machineBusyMsOfStat(await readFile('/proc/stat', 'utf8'), hz),
    plane: await cpuTimeMsOf(parties.planePid),
    redis: parties.redisPid === null ? NaN : await cpuTimeMsOf(parties.redisPid),
    sandboxes: (await Promise.all(files.map((f) => (f ? cgroupCpuMs(f).catch(() => NaN) : NaN)))).reduce((a, b) => a + b, 0),
    client: clientCpuMs(),
  });
  const before = await read();
  return async () => {
    const after = await read();
    const d = (k: Exclude<keyof typeof after, 'at'>): number => after[k] - before[k];
    const split = {
      elapsedMs: after.at - before.at,
      machineMs: d('machine'),
      planeMs: d('plane'),
      redisMs: d('redis'),
      sandboxesMs: d('sandboxes'),
      clientMs: d('client'),
    };
    const known = [split.planeMs, split.redisMs, split.sandboxesMs, split.clientMs].filter(Number.isFinite);
    return { ...split, otherMs: split.machineMs - known.reduce((a, b) => a + b, 0) };
  };
}

/** One line: each party's share of the machine's busy time and its CPU ms per unit of work (`per`, e.g. 1,000 calls). */
export function describeCpuSplit(split: CpuSplit, units: number, per: { count: number; name: string }): string {
  const perUnit = (v: number): string => ((v * per.count) / units).toFixed(0);
  const share = (v: number): string => `${((100 * v) / split.machineMs).toFixed(0)}%`;
  const cores = (split.machineMs / split.elapsedMs).toFixed(2);
  const parts: Array<[string, number]> = [
    ['control plane', split.planeMs],
    ['Redis', split.redisMs],
    ['sandboxes (agents and their tools)', split.sandboxesMs],
    ['bench client', split.clientMs],
    ['rest of the machine (engine, kernel)', split.otherMs],
  ];
  // A party not read (a Redis elsewhere, a cgroup not found) is named as such; its time is in the rest.
  return `CPU over the window: ${cores} cores busy; ${parts
    .map(([name, v]) => (Number.isFinite(v) && units > 0 ? `${name} ${share(v)} (${perUnit(v)} ms per ${per.name})` : `${name} not read`))
    .join(', ')}`;
}
