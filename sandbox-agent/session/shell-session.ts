/**
 * One persistent shell of a shell session, and how one command runs in it without prompt
 * scraping:
 *
 * - The shell (the image's bash, else its sh, else the runtime's busybox sh) is started with
 *   setsid as the tool user, reading its script from stdin (a pipe only the agent writes). For
 *   each command the agent writes a few lines of shell: the command as one single-quoted word
 *   (so nothing in it can end the quoting), run by `eval` in the shell itself (so `cd`, `export`,
 *   functions, aliases and `source venv/bin/activate` stay), with stdin `/dev/null`.
 * - Its stdout and stderr go to two FIFOs made fresh for that command (one for both with
 *   `combinedOutput`), which the agent opened before sending it: no byte of one command can be
 *   taken for another's, whatever it prints.
 * - The shell reports on its own status pipe (fd 3, closed for the command): `B` once it opened
 *   the FIFOs, `E <status>` after the command. A command's output ends when the status came and
 *   its FIFOs closed, or `DRAIN_AFTER_STATUS_MS` after the status when a background job it started
 *   still holds them (its later output is read and dropped, so it never gets SIGPIPE).
 * - Interrupt: SIGINT to the shell's process group (the shell traps it and breaks out of the
 *   command, background jobs ignore it as they do without job control), then SIGTERM and SIGKILL
 *   to the group's other processes, each after a grace; a shell that still does not report is
 *   killed with its whole session (the session ends).
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { closeSync, constants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import { promisify } from 'node:util';
import type { Readable } from 'node:stream';
import { signalGroup } from '../host/process-sweep.js';

const run = promisify(execFile);

/** After a command's status arrived, how long its FIFOs may stay open (a background job holding them), ms. */
export const DRAIN_AFTER_STATUS_MS = 200;

export interface ShellSessionOptions {
  /** The shell's absolute path. */
  shell: string;
  cwd: string;
  env: Record<string, string>;
  uid: number;
  gid: number;
  /** A root-owned directory, searchable by the tool user, for this session's FIFOs. */
  dir: string;
  /** A busybox whose `mkfifo` applet makes the FIFOs. */
  busybox: string;
}

/** How one command ended. `code` is the shell's `$?`; `shellExited` when the shell ended with it (`exit`, `exec`, killed). */
export interface CommandEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
  interrupted: boolean;
  shellExited: boolean;
}

/** Where a command's bytes go (`stderr` never for a combined command): `write` false pauses the pipe until `onDrain`. */
export interface CommandSink {
  write(stream: 'stdout' | 'stderr', data: Buffer): boolean;
  onDrain(stream: 'stdout' | 'stderr', resume: () => void): void;
}

/** A running command: its end, and the interrupt (idempotent) that escalates from SIGINT. */
export interface RunningCommand {
  readonly done: Promise<CommandEnd>;
  interrupt(graceMs: number): void;
}

/** The single-quoted shell word for `text` (POSIX: a `'` becomes `'\''`). */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

/** The shell lines that run one command (see the file's comment). */
export function commandScript(cmd: string, out: string, err: string | null): string {
  const redirect = err === null ? `>${shellQuote(out)} 2>&1` : `>${shellQuote(out)} 2>${shellQuote(err)}`;
  return [
    `__sbx_c=${shellQuote(cmd)}`,
    `trap '__sbx_i=1; break 1000' INT`,
    `{ printf 'B\\n' >&3; for __sbx_o in 1; do eval "$__sbx_c" 3>&-; done; } </dev/null ${redirect}`,
    `printf 'E %d\\n' "$?" >&3`,
    '',
  ].join('\n');
}

export class ShellSession {
  /** The shell's pid: its process group and session id. */
  readonly pid: number;
  /** Resolves when the shell has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly status: Readable;
  private lines: string[] = [];
  private lineWaiter: (() => void) | null = null;
  private buffered = '';
  private statusClosed = false;
  private counter = 0;
  private busy = false;

  private constructor(
    private readonly child: ChildProcess,
    private readonly options: ShellSessionOptions,
  ) {
    this.pid = child.pid!;
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    this.status = child.stdio[3] as Readable;
    this.status.setEncoding('utf8');
    this.status.on('data', (text: string) => {
      this.buffered += text;
      const parts = this.buffered.split('\n');
      this.buffered = parts.pop()!;
      this.lines.push(...parts);
      this.wake();
    });
    this.status.on('close', () => {
      this.statusClosed = true;
      this.wake();
    });
    child.stdin!.on('error', () => {
      // EPIPE: the shell is gone; the status pipe says so.
    });
  }

  /**
   * Starts the shell as the tool user in a new session (setsid). Throws when it cannot be
   * spawned (the shell missing, the cwd gone).
   */
  static async start(options: ShellSessionOptions): Promise<ShellSession> {
    await mkdir(options.dir, { recursive: true, mode: 0o711 });
    const child = spawn(options.shell, [], {
      cwd: options.cwd,
      env: options.env,
      uid: options.uid,
      gid: options.gid,
      detached: true,
      stdio: ['pipe', 'ignore', 'ignore', 'pipe'],
    });
    const spawnError = await new Promise<Error | null>((resolve) => {
      child.once('spawn', () => resolve(null));
      child.once('error', (err) => resolve(err));
    });
    if (spawnError) throw spawnError;
    const session = new ShellSession(child, options);
    // Aliases expand in a non-interactive bash only when asked; sh ignores shopt's absence.
    // The tools' processes are the first the OOM killer takes, as exec's are.
    child.stdin!.write('shopt -s expand_aliases 2>/dev/null\necho 1000 >/proc/self/oom_score_adj 2>/dev/null\n');
    return session;
  }

  /** Whether a command runs now. */
  get running(): boolean {
    return this.busy;
  }

  /**
   * Runs `cmd` (no NUL) in the shell; one at a time (the caller orders them). Its bytes go to
   * `sink` as they come.
   */
  async run(cmd: string, sink: CommandSink, combined: boolean): Promise<RunningCommand> {
    if (this.busy) throw new Error('a command is running in this session');
    this.busy = true;
    this.counter += 1;
    const base = `${this.options.dir}/${this.counter}`;
    const outPath = `${base}.out`;
    const errPath = combined ? null : `${base}.err`;
    const paths = errPath === null ? [outPath] : [outPath, errPath];
    try {
      // Root's, writable by others (the tool user; the agent has no CAP_CHOWN), in a root-owned
      // directory the tool user may search but not list or change.
      await run(this.options.busybox, ['mkfifo', '-m', '602', ...paths]);
    } catch (err) {
      this.busy = false;
      throw err;
    }
    // Read end first (never blocks for a FIFO), then a write end the agent holds until the
    // shell opened its own: without it a reader sees end-of-file before any writer came.
    // Neither blocks (O_NONBLOCK); raw fds, since the sockets own the read ends from here.
    const readers = paths.map((p) => openSync(p, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW));
    const holders = paths.map((p) => openSync(p, constants.O_WRONLY | constants.O_NONBLOCK));
    const sockets = readers.map((fd) => new Socket({ fd, readable: true, writable: false }));
    const closed = sockets.map((s) => new Promise<void>((resolve) => s.once('close', () => resolve())));
    let attached = true;
    sockets.forEach((s, i) => {
      s.on('error', () => {});
      s.on('data', (data: Buffer) => {
        if (!attached) return;
        const stream = i === 0 ? 'stdout' : 'stderr';
        if (!sink.write(stream, data)) {
          s.pause();
          sink.onDrain(stream, () => s.resume());
        }
      });
    });
    // Once the shell opened the FIFOs (or gave up), the agent's write ends and the names go.
    const releaseHolders = async (): Promise<void> => {
      for (const fd of holders.splice(0)) closeSync(fd);
      await Promise.all(paths.map((p) => rm(p, { force: true })));
    };

    let interruptStarted = false;
    let finished = false;
    let escalation: NodeJS.Timeout | null = null;
    // The command's trap is set by its script before it reports `B`: a SIGINT before then would
    // meet the shell without it (the first command of a session: SIGINT's default ends the
    // shell), so an interrupt asked for earlier waits for `B`.
    let begun = false;
    let pendingGraceMs: number | null = null;
    const interrupt = (graceMs: number): void => {
      if (interruptStarted) return;
      if (!begun) {
        pendingGraceMs = graceMs;
        return;
      }
      interruptStarted = true;
      signalGroup(this.pid, 'SIGINT');
      const steps: Array<() => Promise<void> | void> = [
        () => signalOthersInGroup(this.pid, 'SIGTERM'),
        () => signalOthersInGroup(this.pid, 'SIGKILL'),
        // The shell itself does not come back (a builtin loop with SIGINT ignored): the session goes.
        () => killSession(this.pid),
      ];
      const next = (): void => {
        const step = steps.shift();
        if (!step || finished) return;
        escalation = setTimeout(() => {
          void Promise.resolve(step()).then(next);
        }, graceMs);
      };
      next();
    };

    this.child.stdin!.write(commandScript(cmd, outPath, errPath));
    const done = (async (): Promise<CommandEnd> => {
      let code: number | null = null;
      let shellExited = false;
      for (;;) {
        const line = await this.nextLine();
        if (line === null) {
          shellExited = true;
          break;
        }
        if (line === 'B') {
          await releaseHolders();
          begun = true;
          if (pendingGraceMs !== null) interrupt(pendingGraceMs);
        } else if (line.startsWith('E ')) {
          code = Number(line.slice(2));
          break;
        }
      }
      await releaseHolders();
      finished = true;
      if (escalation) clearTimeout(escalation);
      let signal: NodeJS.Signals | null = null;
      if (shellExited) {
        const exit = await this.exited;
        code = exit.code;
        signal = exit.signal;
      }
      // Every byte the command wrote before its status is in the FIFOs: read to end-of-file, or
      // for a moment when a background job holds them; what comes later is dropped.
      await Promise.race([Promise.all(closed), new Promise((r) => setTimeout(r, DRAIN_AFTER_STATUS_MS))]);
      attached = false;
      for (const s of sockets) s.resume();
      this.busy = false;
      return { code, signal, interrupted: interruptStarted, shellExited };
    })();
    return { done, interrupt };
  }

  /** Kills the shell and every process of its session; resolves once the shell has exited. */
  async kill(): Promise<void> {
    await killSession(this.pid);
    await this.exited;
    await rm(this.options.dir, { recursive: true, force: true });
  }

  private wake(): void {
    const w = this.lineWaiter;
    this.lineWaiter = null;
    w?.();
  }

  /** The next status line, or null once the status pipe closed (the shell is gone). */
  private async nextLine(): Promise<string | null> {
    for (;;) {
      const line = this.lines.shift();
      if (line !== undefined) return line;
      if (this.statusClosed) return null;
      await new Promise<void>((resolve) => (this.lineWaiter = resolve));
    }
  }
}

/** Pids of live processes whose process group (`by: 'pgid'`) or session (`by: 'sid'`) is `id`. */
async function membersOf(id: number, by: 'pgid' | 'sid'): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => null);
    if (!stat) continue;
    // stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces, so count after the last ')'.
    const [state = '', , pgid, sid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (state === 'Z' || state === 'X') continue;
    if (Number(by === 'pgid' ? pgid : sid) === id) out.push(Number(name));
  }
  return out;
}

/** Signals every process in the shell's group but the shell. */
async function signalOthersInGroup(shellPid: number, signal: NodeJS.Signals): Promise<void> {
  for (const pid of await membersOf(shellPid, 'pgid')) {
    if (pid === shellPid) continue;
    try {
      process.kill(pid, signal);
    } catch {
      // ESRCH
    }
  }
}

/** SIGKILLs every process of session `sid` (the shell, its jobs, what they started), repeating while new ones appear. */
export async function killSession(sid: number): Promise<void> {
  for (let round = 0; round < 5; round += 1) {
    signalGroup(sid, 'SIGKILL');
    const left = await membersOf(sid, 'sid');
    if (left.length === 0) return;
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // ESRCH
      }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}
