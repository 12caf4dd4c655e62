/**
 * Signals every process of one session (setsid(2): the leader's pid is the session id), also
 * those an interactive shell moved to process groups of their own (its jobs). A terminal's tree
 * is its session: killing the leader's group alone would leave a stopped or background job.
 *
 * Reads /proc/<pid>/stat (proc(5): field 6 is the session id).
 */
import { readdir, readFile } from 'node:fs/promises';

/** Pids of the live (not zombie) processes whose session id is `sid`. */
export async function sessionMembers(sid: number): Promise<number[]> {
  const members: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => null);
    if (!stat) continue;
    // "pid (comm) state ppid pgrp session ..."; comm may hold spaces and parentheses.
    const [state = '', , , session] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(session) === sid && state !== 'Z' && state !== 'X') members.push(Number(name));
  }
  return members;
}

/** Sends `signal` to every process of session `sid`; returns how many it reached. */
export async function signalSession(sid: number, signal: NodeJS.Signals): Promise<number> {
  let reached = 0;
  for (const pid of await sessionMembers(sid)) {
    try {
      process.kill(pid, signal);
      reached += 1;
    } catch {
      // ESRCH: gone already.
    }
  }
  return reached;
}
