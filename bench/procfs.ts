/**
 * Memory of processes read from the host's /proc (proc(5)): the control plane's, and each
 * agent's — the agent runs in its sandbox's PID namespace, but `docker top` names its host pid,
 * and /proc/<pid>/status on the host is the same process. Needs the bench to run on the Docker
 * host (as deploy/local does).
 */
import { readFile } from 'node:fs/promises';
import type Docker from 'dockerode';

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

/** Host pid of the sandbox agent (`/opt/sbx/bin/node /opt/sbx/agent/sbx-agent.cjs`, from the runtime mount) in container `name`. */
export async function agentPid(docker: Docker, name: string): Promise<number> {
  const top = (await docker.getContainer(name).top({ ps_args: '-eo pid,args' })) as { Titles: string[]; Processes: string[][] };
  const pidCol = top.Titles.findIndex((t) => t.toUpperCase() === 'PID');
  const row = top.Processes.find((p) => p.some((col) => /^\S*node \S*sbx-agent\.cjs$/.test(col)));
  if (!row || pidCol < 0) throw new Error(`no agent process in ${name}`);
  return Number(row[pidCol]);
}
