/**
 * The sandbox's process table read from /proc (the agent runs as root in the sandbox's pid
 * namespace, so it sees every process of the sandbox and no other): per process its pid, parent,
 * session, uid and user name, command line, state, CPU time and resident memory.
 *
 * proc(5): /proc/<pid>/stat (fields after the `(comm)`: state, ppid, pgrp, session, ..., utime
 * and stime in clock ticks at fields 14 and 15), /proc/<pid>/status (`Uid:`, `VmRSS:` in kB),
 * /proc/<pid>/cmdline (argv, NUL-separated; empty for a zombie).
 */
import { readdir, readFile } from 'node:fs/promises';

/**
 * Clock ticks per second of utime/stime (sysconf(_SC_CLK_TCK)). 100 on every Linux
 * architecture sbx runs on (x86_64 and arm64 fix USER_HZ at 100).
 */
const CLOCK_TICKS_PER_SECOND = 100;

/** One process of the sandbox as /proc shows it. */
export interface ProcessEntry {
  pid: number;
  ppid: number;
  pgid: number;
  /** Session id (setsid(2)): the pid of the session's leader. */
  sid: number;
  uid: number;
  /** The user's name in the image's /etc/passwd, else the uid as a string. */
  user: string;
  /** argv joined by spaces, or `[comm]` when there is none (a zombie). */
  command: string;
  /** proc(5) state letter. */
  state: string;
  /** user + system CPU time, ms. */
  cpuTimeMs: number;
  /** Resident set size, bytes (0 without one). */
  rssBytes: number;
}

/** Names by uid from /etc/passwd; empty when unreadable. */
async function userNames(): Promise<Map<number, string>> {
  const text = await readFile('/etc/passwd', 'utf8').catch(() => '');
  const names = new Map<number, string>();
  for (const line of text.split('\n')) {
    const [name, , uid] = line.split(':');
    if (name && uid && /^\d+$/.test(uid) && !names.has(Number(uid))) names.set(Number(uid), name);
  }
  return names;
}

async function readEntry(pid: number, users: Map<number, string>): Promise<ProcessEntry | null> {
  const [stat, status, cmdline] = await Promise.all([
    readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null),
    readFile(`/proc/${pid}/status`, 'utf8').catch(() => null),
    readFile(`/proc/${pid}/cmdline`).catch(() => null),
  ]);
  if (!stat || !status) return null; // exited meanwhile
  const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
  // After the last ')': state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
  const rssKb = Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? 0);
  const ticks = Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
  const argv = cmdline && cmdline.length > 0 ? cmdline.toString('utf8').replace(/\0+$/, '').split('\0') : [];
  return {
    pid,
    ppid: Number(fields[1]),
    pgid: Number(fields[2]),
    sid: Number(fields[3]),
    uid,
    user: users.get(uid) ?? String(uid),
    command: argv.length > 0 ? argv.join(' ') : `[${comm}]`,
    state: fields[0] ?? '?',
    cpuTimeMs: Math.round((ticks * 1000) / CLOCK_TICKS_PER_SECOND),
    rssBytes: rssKb * 1024,
  };
}

/** Every process of the sandbox, by pid ascending. */
export async function readProcessTable(): Promise<ProcessEntry[]> {
  const users = await userNames();
  const pids = (await readdir('/proc'))
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .sort((a, b) => a - b);
  const entries = await Promise.all(pids.map((pid) => readEntry(pid, users)));
  return entries.filter((e): e is ProcessEntry => e !== null);
}

/** One process of the sandbox, or null when there is no such pid. */
export async function readProcess(pid: number): Promise<ProcessEntry | null> {
  return readEntry(pid, await userNames());
}

/**
 * Whether `pid` hangs off a process whose parent is outside the sandbox's pid namespace
 * (ppid 0), init aside: started by a `docker exec` (the files API's tar), not by the agent.
 */
export function startedFromOutside(pid: number, byPid: ReadonlyMap<number, Pick<ProcessEntry, 'pid' | 'ppid'>>): boolean {
  let current = byPid.get(pid);
  for (let hops = 0; current && hops < 4096; hops += 1) {
    if (current.ppid === 0) return current.pid !== 1;
    current = byPid.get(current.ppid);
  }
  return false;
}
