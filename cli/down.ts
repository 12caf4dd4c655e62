/**
 * `sbx down` (`npm run stop`): stops what set-up and `npm start` left running for one data
 * directory, and nothing else. Each process is found by its pidfile under the data directory and
 * checked to be that very process before it is signalled: a control plane (`npm start`) by the
 * start time its pidfile records and its command line, the private Redis by its name and the
 * socket or config path of this data directory in its command line. Each gets SIGTERM and is
 * waited for; control planes go first, since they need Redis to shut down cleanly.
 *
 * Left running on purpose: `dockerd` (shared with whatever else uses Docker on the host; set-up
 * only starts it when none runs) and the sandboxes (they outlive the control plane by design:
 * the next start adopts them; `sbx release ID` ends one).
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { CONTROL_PLANE_PIDFILE, dataDirLayout, parsePidfile, processIdentity } from '../contract/data-dir.js';

/** One process `down` dealt with. */
export interface DownEntry {
  what: 'control-plane' | 'redis-server';
  pid: number;
  pidfile: string;
  /**
   * `stopped`: it was running, got SIGTERM and exited. `stale`: the pidfile named no running
   * process of this data dir (it crashed, or the pid now belongs to another process, which is
   * left alone); the pidfile is removed. `timed_out`: signalled, still running after the timeout.
   */
  outcome: 'stopped' | 'stale' | 'timed_out';
  detail: string;
}

export interface DownReport {
  dataDir: string;
  entries: DownEntry[];
  /** Pidfiles that could not be read (other than missing): nothing was signalled for them. */
  errors: string[];
}

/** Interval of the exit check, ms (see `waitGone`). */
const EXIT_POLL_MS = 50;

/**
 * Stops the control planes of `dataDir`, then (once all of them have exited) its Redis, each
 * given `timeoutMs` to exit after SIGTERM. Never throws for a missing or stale pidfile (nothing
 * running is success); unreadable pidfiles, and a Redis left running for a control plane that
 * did not exit, are in `errors`.
 */
export async function down(dataDir: string, timeoutMs: number): Promise<DownReport> {
  const layout = dataDirLayout(dataDir);
  const report: DownReport = { dataDir, entries: [], errors: [] };
  let names: string[] = [];
  try {
    names = readdirSync(layout.controlPlaneRunDir);
  } catch (err) {
    if (!isMissing(err)) report.errors.push(`cannot list ${layout.controlPlaneRunDir}: ${messageOf(err)}`);
  }
  const planes = names
    .filter((n) => CONTROL_PLANE_PIDFILE.test(n))
    .map((n) => stopControlPlane(`${layout.controlPlaneRunDir}/${n}`, timeoutMs, report));
  await Promise.all(planes);
  const stillRunning = report.entries.filter((e) => e.outcome === 'timed_out').map((e) => e.pid);
  // A control plane still running needs its Redis to finish what it is doing.
  if (stillRunning.length > 0) report.errors.push(`redis-server left running: control plane pid ${stillRunning.join(', ')} has not exited`);
  else await stopRedis(layout, timeoutMs, report);
  return report;
}

async function stopControlPlane(pidfile: string, timeoutMs: number, report: DownReport): Promise<void> {
  const text = readPidfile(pidfile, report);
  if (text === null) return;
  const recorded = parsePidfile(text);
  const pid = recorded?.pid ?? 0;
  const running = recorded ? processIdentity(recorded.pid) : null;
  const stale = (detail: string): void => {
    rmSync(pidfile, { force: true });
    report.entries.push({ what: 'control-plane', pid, pidfile, outcome: 'stale', detail });
  };
  if (!recorded) return stale('unreadable pidfile');
  // Another start time: the control plane died and its pid went to a later process.
  if (!running || running.startTicks !== recorded.startTicks)
    return stale(`pid ${pid} is not running (the control plane did not exit cleanly)`);
  if (!commandLine(pid).some((arg) => arg.endsWith('control-plane/main.js'))) return stale(`pid ${pid} is not a control plane`);
  const entry = await terminate('control-plane', running, pidfile, timeoutMs, `control plane pid ${pid} (${commandLine(pid).join(' ')})`);
  report.entries.push(entry);
  // A control plane that has not exited keeps its pidfile: a later `sbx down` must find it (and
  // leave Redis running under it) rather than take the data dir for one with nothing running.
  if (entry.outcome === 'stopped') rmSync(pidfile, { force: true });
}

async function stopRedis(layout: ReturnType<typeof dataDirLayout>, timeoutMs: number, report: DownReport): Promise<void> {
  const pidfile = layout.redisPidfile;
  const text = readPidfile(pidfile, report);
  if (text === null) return;
  const pid = Number(text.trim());
  const running = Number.isSafeInteger(pid) && pid > 0 ? processIdentity(pid) : null;
  const stale = (detail: string): void => {
    rmSync(pidfile, { force: true });
    report.entries.push({ what: 'redis-server', pid, pidfile, outcome: 'stale', detail });
  };
  if (!running) return stale(`pid ${text.trim()} is not running`);
  const comm = readOr(`/proc/${pid}/comm`, '').trim();
  const cmdline = commandLine(pid).join(' ');
  // Redis rewrites its command line to its title (`redis-server unixsocket:<path>`); a title
  // template of one's own may show the config file instead. Either names this data directory.
  if (comm !== 'redis-server' || !(cmdline.includes(layout.redisSocket) || cmdline.includes(layout.redisConf))) {
    return stale(`pid ${pid} is not the redis-server of this data directory (${comm || '?'}: ${cmdline || '?'}); left alone`);
  }
  report.entries.push(await terminate('redis-server', running, pidfile, timeoutMs, `redis-server pid ${pid} (${cmdline})`));
}

/** SIGTERM to the process `identity` names, then waits for it to exit. */
async function terminate(
  what: DownEntry['what'],
  identity: { pid: number; startTicks: string },
  pidfile: string,
  timeoutMs: number,
  name: string,
): Promise<DownEntry> {
  try {
    process.kill(identity.pid, 'SIGTERM');
  } catch (err) {
    // ESRCH: it exited between the check and the signal, which is what was wanted.
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
  const gone = await waitGone(identity, timeoutMs);
  return gone
    ? { what, pid: identity.pid, pidfile, outcome: 'stopped', detail: `stopped ${name}` }
    : { what, pid: identity.pid, pidfile, outcome: 'timed_out', detail: `${name} still runs ${timeoutMs} ms after SIGTERM` };
}

/**
 * True once the process is gone (or a zombie, or its pid taken by a later process), false when
 * `timeoutMs` passed first. Linux tells only a process's parent when it exits, and Node offers no
 * pidfd to wait on, so /proc is looked at every EXIT_POLL_MS.
 */
async function waitGone(identity: { pid: number; startTicks: string }, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = processIdentity(identity.pid);
    if (!now || now.startTicks !== identity.startTicks) return true;
    if (Date.now() >= deadline) return false;
    await delay(EXIT_POLL_MS);
  }
}

/** The pidfile's text; null when it does not exist (nothing to stop) or cannot be read (in `errors`). */
function readPidfile(path: string, report: DownReport): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if (!isMissing(err)) report.errors.push(`cannot read ${path}: ${messageOf(err)}`);
    return null;
  }
}

function commandLine(pid: number): string[] {
  return readOr(`/proc/${pid}/cmdline`, '').split('\0').filter(Boolean);
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

const isMissing = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ENOENT';
const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** The report as lines for a terminal. */
export function describeDown(report: DownReport): string[] {
  const lines = report.entries.map((e) => (e.outcome === 'stale' ? `removed stale ${e.pidfile}: ${e.detail}` : e.detail));
  if (!report.entries.some((e) => e.outcome === 'stopped' || e.outcome === 'timed_out'))
    lines.unshift(`nothing of ${report.dataDir} was running`);
  lines.push(...report.errors);
  lines.push(
    'left running: dockerd (shared with everything else on this host) and the sandboxes (they outlive the control plane; the next start adopts them; `sbx release ID` ends one)',
  );
  return lines;
}

/** True when everything found was stopped (or nothing was running). */
export function downSucceeded(report: DownReport): boolean {
  return report.errors.length === 0 && report.entries.every((e) => e.outcome !== 'timed_out');
}
