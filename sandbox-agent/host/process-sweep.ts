/**
 * Finds and kills what a call left behind, including processes that left its process group
 * (setsid, double-fork daemons): every process of the tool user, except those started by a
 * `docker exec` (the files API's tar), whose tree hangs off a process with parent pid 0 in the
 * sandbox's pid namespace. Only sound while no other call runs as the tool user, which the
 * scheduler guarantees for `exec` (it declares access to everything).
 *
 * Reads /proc/<pid>/status (world-readable; proc(5): `Uid:` real uid, `PPid:` parent).
 */
import { readdirSync, readFileSync } from 'node:fs';

interface ProcInfo {
  pid: number;
  ppid: number;
  pgid: number;
  /** Session id (setsid(2)): the pid of the session's leader. */
  sid: number;
  uid: number;
  /** proc(5) state letter: `Z` (zombie) and `X` (dead) have exited already. */
  state: string;
}

/**
 * Synchronous on purpose: a sandbox holds a few processes, and a handful of /proc reads take
 * less time than one trip through libuv's thread pool each (the sweep ran ~2.6 ms async, on
 * every exec's path).
 */
function listProcesses(): Map<number, ProcInfo> {
  const out = new Map<number, ProcInfo>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const text = readOrNull(`/proc/${name}/status`);
    const stat = text === null ? null : readOrNull(`/proc/${name}/stat`);
    if (text === null || stat === null) continue; // exited meanwhile
    const ppid = /^PPid:\s+(\d+)/m.exec(text);
    const uid = /^Uid:\s+(\d+)/m.exec(text);
    // stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses, so count after the last ')'.
    const [state = '', , pgid, sid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (ppid && uid) {
      out.set(Number(name), { pid: Number(name), ppid: Number(ppid[1]), pgid: Number(pgid), sid: Number(sid), uid: Number(uid[1]), state });
    }
  }
  return out;
}

function readOrNull(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** True when `pid` descends from a process whose parent is outside the namespace (ppid 0), PID 1 aside. */
function startedByDockerExec(pid: number, procs: Map<number, ProcInfo>): boolean {
  let current = procs.get(pid);
  for (let hops = 0; current && hops < 4096; hops += 1) {
    if (current.ppid === 0) return current.pid !== 1;
    current = procs.get(current.ppid);
  }
  return false;
}

/**
 * SIGKILLs every member of process group `pgid` at once and returns the pids that were alive. The
 * group is stopped first (SIGSTOP, one signal for all) so that nobody forks or exits between the
 * listing and the kill: the list is exactly what the SIGKILL killed. Empty when the group is.
 */
export async function killProcessGroup(pgid: number): Promise<number[]> {
  if (!signalGroup(pgid, 'SIGSTOP')) return [];
  const members = [...listProcesses().values()].filter((p) => p.pgid === pgid && alive(p)).map((p) => p.pid);
  signalGroup(pgid, 'SIGKILL');
  return members;
}

/** Whether the process has not exited: `Z` (zombie) and `X` (dead) have, and only wait for their parent. */
function alive(p: ProcInfo): boolean {
  return p.state !== 'Z' && p.state !== 'X';
}

/** Sends `signal` to process group `pgid`; false when the group has no member (ESRCH). */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * SIGKILLs every process of `uid` not started by a docker exec, not in `keep` and not in one of
 * the `keepSessions` (session ids of the kept trees: background tasks, shell sessions,
 * terminals; `ProcessTrees`), repeating while new ones appear (a dying parent may have forked),
 * up to 5 rounds. Returns how many it killed.
 */
export async function sweepProcesses(
  uid: number,
  keep: ReadonlySet<number> = new Set(),
  keepSessions: ReadonlySet<number> = new Set(),
): Promise<number> {
  // A process killed in one round may still be listed in the next (the kernel has not finished it yet): counted once.
  const killed = new Set<number>();
  for (let round = 0; round < 5; round += 1) {
    const procs = listProcesses();
    const victims = [...procs.values()].filter(
      (p) =>
        p.uid === uid &&
        alive(p) &&
        !killed.has(p.pid) &&
        !keep.has(p.pid) &&
        !keepSessions.has(p.sid) &&
        !startedByDockerExec(p.pid, procs),
    );
    if (victims.length === 0) break;
    for (const victim of victims) {
      try {
        process.kill(victim.pid, 'SIGKILL');
        killed.add(victim.pid);
      } catch {
        // ESRCH: gone already.
      }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return killed.size;
}
