/**
 * The layout of a data directory (`SBX_DATA_DIR`) that set-up (deploy/local/redis.sh), the
 * control plane (main.ts) and `sbx down` share, and the control plane's pidfile: how `sbx down`
 * finds exactly the processes set-up and `npm start` left running for one data directory.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** `SBX_DATA_DIR` when unset. */
export const DEFAULT_DATA_DIR = '/var/lib/sbx';

/** Paths under `dataDir`. */
export function dataDirLayout(dataDir: string): {
  /** The private Redis's unix socket (its directory is bind-mounted into sandboxes). */
  redisSocket: string;
  /** The Redis default user's password (32 hex characters). */
  redisPassword: string;
  /** The config set-up writes and starts Redis with. */
  redisConf: string;
  /** Written by redis-server itself (`pidfile`): its pid. */
  redisPidfile: string;
  /** One pidfile per running control plane (`npm start`), see `controlPlanePidfile`. */
  controlPlaneRunDir: string;
} {
  return {
    redisSocket: join(dataDir, 'redis-socket', 'redis.sock'),
    redisPassword: join(dataDir, 'redis', 'password'),
    redisConf: join(dataDir, 'redis', 'redis.conf'),
    redisPidfile: join(dataDir, 'redis', 'redis.pid'),
    controlPlaneRunDir: join(dataDir, 'run'),
  };
}

/** The pidfile of control-plane process `pid`: `<data dir>/run/control-plane.<pid>.pid`. */
export function controlPlanePidfile(dataDir: string, pid: number): string {
  return join(dataDirLayout(dataDir).controlPlaneRunDir, `control-plane.${pid}.pid`);
}

/** Matches a control plane's pidfile name; group 1 is the pid. */
export const CONTROL_PLANE_PIDFILE = /^control-plane\.(\d+)\.pid$/;

/**
 * The identity of a running process: its pid and its start time (clock ticks after boot, field
 * 22 of /proc/<pid>/stat), which a later process given the same pid cannot have. Null when no
 * such process is running (a zombie — exited, not yet reaped — counts as not running).
 */
export function processIdentity(pid: number): { pid: number; startTicks: string } | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces and ')': fields after it
  // are counted from its last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return null;
  return { pid, startTicks: fields[19]! };
}

/** The text of a control plane's pidfile: `<pid> <startTicks>`, so a reused pid is told apart. */
export function formatPidfile(identity: { pid: number; startTicks: string }): string {
  return `${identity.pid} ${identity.startTicks}\n`;
}

/** Parses what `formatPidfile` wrote; null for anything else. */
export function parsePidfile(text: string): { pid: number; startTicks: string } | null {
  const match = /^(\d+) (\d+)\n?$/.exec(text);
  return match ? { pid: Number(match[1]), startTicks: match[2]! } : null;
}
