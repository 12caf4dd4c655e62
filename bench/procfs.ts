/**
 * Memory of processes read from the host's /proc (proc(5)): the control plane's, and each
 * agent's — the agent runs in its sandbox's PID namespace, but `docker top` names its host pid,
 * and /proc/<pid>/status on the host is the same process. Needs the bench to run on the Docker
 * host (as deploy/local does).
 */
import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type Docker from 'dockerode';
import { AGENT_COMMAND } from '../contract/agent-runtime.js';

export interface Memory {
  /** Resident set now (VmRSS). */
  rssBytes: number;
  /** Peak resident set since the process started (VmHWM). */
  hwmBytes: number;
  /**
   * Proportional set size (smaps_rollup `Pss`): resident pages, each shared page divided by the
   * processes sharing it — what one more agent costs, where RSS counts the node binary's pages
   * (shared by every agent) in full for each. NaN where the kernel has no smaps_rollup.
   */
  pssBytes: number;
}

/** VmRSS and VmHWM of `pid`; throws when the process is gone. */
export async function memoryOf(pid: number): Promise<Memory> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const pssKb = Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN);
  return { rssBytes: kb('VmRSS'), hwmBytes: kb('VmHWM'), pssBytes: pssKb * 1024 };
}

/** Host pid of the sandbox agent (its command line is AGENT_COMMAND, from the runtime mount) in container `name`. */
export async function agentPid(docker: Docker, name: string): Promise<number> {
  const top = (await docker.getContainer(name).top({ ps_args: '-eo pid,args' })) as { Titles: string[]; Processes: string[][] };
  const pidCol = top.Titles.findIndex((t) => t.toUpperCase() === 'PID');
  const row = top.Processes.find((p) => p.some((col) => col === AGENT_COMMAND.join(' ')));
  if (!row || pidCol < 0) throw new Error(`no agent process in ${name}`);
  return Number(row[pidCol]);
}

/**
 * User plus system CPU time in clock ticks from the text of /proc/<pid>/stat (proc(5): fields
 * 14 `utime` and 15 `stime`, counted after the `)` that ends the command name, which may itself
 * hold spaces and parentheses). Throws on text that is not a stat line.
 */
export function cpuTicksOfStat(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the name, field 3 (`state`) is index 0, so field n is index n - 3.
  const utime = Number(fields[14 - 3]);
  const stime = Number(fields[15 - 3]);
  if (!stat.includes(')') || !Number.isInteger(utime) || !Number.isInteger(stime))
    throw new Error(`not a /proc/<pid>/stat line: ${stat.slice(0, 80)}`);
  return utime + stime;
}

let ticksPerSecond: number | undefined;

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 where it cannot be asked). */
export function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU time (user + system) `pid` has used since it started, ms, in steps of one clock tick (10 ms at 100 Hz). */
export async function cpuTimeMsOf(pid: number): Promise<number> {
  return (cpuTicksOfStat(await readFile(`/proc/${pid}/stat`, 'utf8')) * 1000) / clockTicksPerSecond();
}
