/**
 * How exec calls' processes start: from the runtime's spawn server (`sbx-exec --serve`,
 * images/runtime/sbx-exec.c, whose header holds the protocol), started once per agent, so the
 * agent's own Node process is never forked per call. A fork copies the page tables of the whole
 * forking process and the child's exec tears them down again: from the agent (some 60 MiB) that
 * cost about 10 ms of CPU per `exec true` on the bench's 2-core VM, from the small static server
 * about 2.7 ms.
 *
 * The server forks the child with fresh pipes as its stdio; the agent opens their other ends
 * through `/proc/<server>/fd/<n>` (a pipe opened there is a new open file of the same pipe,
 * proc(5)) and wraps them as sockets, as Node does a child's pipes. The child is what
 * `spawn(AGENT_RUNTIME_EXEC, args, { detached: true, uid, gid, cwd, env })` made before: its own
 * session and process group, the tool user's ids, the launcher's work (oom_score_adj, combined
 * output, PATH lookup). Differences: stdio are pipes, not socket pairs; the working directory is
 * entered after the drop to the tool user, not before.
 *
 * When the server cannot start or ends, calls fall back to Node's spawn of the launcher (the same
 * isolation, only slower), and a call whose process outlived the server learns no exit status:
 * its `exit` event has code and signal null once the process is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { closeSync, constants as fsConstants, openSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { Socket } from 'node:net';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { getSystemErrorName } from 'node:util';
import type { Logger } from 'pino';
import { AGENT_RUNTIME_EXEC } from '../../contract/agent-runtime.js';
import { signalGroup } from './process-sweep.js';

/** Who the process runs as, where, and with which environment. */
export interface LaunchOptions {
  cwd: string;
  env: Record<string, string>;
  uid: number;
  gid: number;
}

/**
 * A started launcher process, as exec uses it (a subset of Node's ChildProcess): emits `spawn`
 * (the streams are set from then on) or `error` (nothing ran), then `exit` (code, signal).
 */
export interface LaunchedProcess extends EventEmitter {
  readonly pid?: number | undefined;
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
}

/**
 * Starts the launcher (`sbx-exec [options] -- PROGRAM [ARG...]`) with `launcherArgs`.
 * @throws TypeError when an argument, a variable or the cwd holds a NUL byte (as Node's spawn).
 */
export type Launch = (launcherArgs: string[], options: LaunchOptions) => LaunchedProcess;

/** The launcher started by Node's spawn from the agent's process: the fallback. */
export const spawnLauncher: Launch = (launcherArgs, o) =>
  spawn(AGENT_RUNTIME_EXEC, launcherArgs, {
    cwd: o.cwd,
    env: o.env,
    uid: o.uid,
    gid: o.gid,
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
  });

/** The largest request the server takes (MAX_BODY in sbx-exec.c); the kernel's own limit is far lower (execve(2), E2BIG). */
const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
/** Bytes of one reply of the server. */
const REPLY_BYTES = 24;
/** How often a process that outlived the server is looked for until it is gone, ms. */
const ORPHAN_POLL_MS = 100;
/** Signal names by number; the first of aliases (SIGABRT, not SIGIOT), as Node names them. */
const SIGNAL_NAMES = new Map<number, string>();
for (const [name, n] of Object.entries(osConstants.signals)) if (!SIGNAL_NAMES.has(n)) SIGNAL_NAMES.set(n, name);

/** The error code of a call whose request reached the server and whose start nobody saw: it may run. */
export const SPAWN_UNKNOWN = 'SBX_SPAWN_UNKNOWN';

class ServedProcess extends EventEmitter implements LaunchedProcess {
  pid: number | undefined;
  stdin!: Writable;
  stdout!: Readable;
  stderr!: Readable;
}

/** One agent's spawn server and the processes it started that have not ended yet. */
export class ToolSpawner {
  private readonly starting = new Map<number, ServedProcess>();
  private readonly running = new Map<number, ServedProcess>();
  private replies: Buffer = Buffer.alloc(0);
  private nextId = 1;
  private ended = false;

  private constructor(
    private readonly server: ChildProcess,
    private readonly log: Logger,
  ) {
    server.stdout!.on('data', (chunk: Buffer) => this.onReplies(chunk));
    server.stdin!.on('error', () => {
      // EPIPE: the server ended; its 'exit' says so.
    });
    server.once('error', (err) => this.serverEnded(err.message));
    // 'close', not 'exit': after the server's stdout ended, so no reply it wrote is left unread.
    server.once('close', (code, signal) => this.serverEnded(`exited with ${code ?? signal}`));
  }

  /** Starts the server (`binary --serve`, as the agent's user: root). */
  static start(log: Logger, binary = AGENT_RUNTIME_EXEC): ToolSpawner {
    return new ToolSpawner(spawn(binary, ['--serve'], { stdio: ['pipe', 'pipe', 'inherit'] }), log);
  }

  /** The server's pid while it runs, else null: a sweep spares it. */
  get pid(): number | null {
    return this.ended ? null : (this.server.pid ?? null);
  }

  /** Starts a launcher from the server, or from the agent once the server has ended. */
  readonly launch: Launch = (launcherArgs, options) => {
    if (this.ended) return spawnLauncher(launcherArgs, options);
    const id = this.nextId++;
    this.server.stdin!.write(spawnRequest(id, launcherArgs, options));
    const child = new ServedProcess();
    this.starting.set(id, child);
    return child;
  };

  /** Ends the server: its stdin closes. Processes it started run on. */
  stop(): void {
    this.server.stdin!.end();
  }

  private onReplies(chunk: Buffer): void {
    this.replies = this.replies.length === 0 ? chunk : Buffer.concat([this.replies, chunk]);
    let at = 0;
    for (; this.replies.length - at >= REPLY_BYTES; at += REPLY_BYTES) {
      const r = this.replies.subarray(at, at + REPLY_BYTES);
      const kind = String.fromCharCode(r[0]!);
      const id = r.readUInt32LE(4);
      if (kind === 'S') this.spawned(id, r.readInt32LE(8), [r.readInt32LE(12), r.readInt32LE(16), r.readInt32LE(20)]);
      else if (kind === 'E') this.notSpawned(id, r.readInt32LE(8));
      else if (kind === 'X') this.exited(id, r.readInt32LE(12));
    }
    this.replies = this.replies.subarray(at);
  }

  private spawned(id: number, pid: number, [inFd, outFd, errFd]: number[]): void {
    const child = this.starting.get(id);
    this.starting.delete(id);
    if (!child) return;
    child.pid = pid;
    this.running.set(id, child);
    const opened: number[] = [];
    try {
      const open = (fd: number, flags: number): number => {
        const own = openSync(`/proc/${this.server.pid}/fd/${fd}`, flags | fsConstants.O_NONBLOCK); // libuv adds O_CLOEXEC
        opened.push(own);
        return own;
      };
      const stdin = open(inFd!, fsConstants.O_WRONLY);
      const stdout = open(outFd!, fsConstants.O_RDONLY);
      const stderr = open(errFd!, fsConstants.O_RDONLY);
      child.stdin = new Socket({ fd: stdin, readable: false, writable: true });
      child.stdout = new Socket({ fd: stdout, readable: true, writable: false });
      child.stderr = new Socket({ fd: stderr, readable: true, writable: false });
    } catch (err) {
      // The process runs but its pipes cannot be had (EMFILE): it is killed, and its exit says so.
      for (const fd of opened) closeSync(fd);
      this.log.error({ err, pid }, "could not open a call's pipes from the spawn server; its process is killed");
      signalGroup(pid, 'SIGKILL');
      child.stdin = new PassThrough().resume();
      child.stdout = new PassThrough().end();
      child.stderr = new PassThrough().end();
    }
    this.server.stdin!.write(closeRequest(id));
    child.emit('spawn');
  }

  private notSpawned(id: number, errno: number): void {
    const child = this.starting.get(id);
    this.starting.delete(id);
    const code = getSystemErrorName(-errno);
    child?.emit('error', Object.assign(new Error(`spawn ${AGENT_RUNTIME_EXEC} ${code}`), { code, errno: -errno }));
  }

  private exited(id: number, status: number): void {
    const child = this.running.get(id);
    this.running.delete(id);
    // wait(2) status: the low 7 bits are the terminating signal, 0 for a normal exit with its code in bits 8-15.
    const signal = status & 0x7f;
    // A signal without a name (a real-time one) is named by its number, never null: (null, null) means a lost status.
    const [code, name] = signal === 0 ? [(status >> 8) & 0xff, null] : [null, SIGNAL_NAMES.get(signal) ?? `SIG${signal}`];
    // In a later turn of the loop, as Node's ChildProcess does: a reply read with its 'S' must
    // not end the process before the code that awaited 'spawn' has listened for 'exit'.
    setImmediate(() => {
      // As Node's ChildProcess: stdin goes with the process (an open `stdin: "pipe"` would leak its fd).
      child?.stdin.destroy();
      child?.emit('exit', code, name);
    });
  }

  /** The server is gone: later calls spawn from the agent; calls in flight learn what can be known. */
  private serverEnded(why: string): void {
    if (this.ended) return;
    this.ended = true;
    this.log.error({ why }, 'the spawn server ended; exec calls now start from the agent');
    // A request the server read may have been forked before it died: whether the program runs is unknown.
    for (const child of this.starting.values()) {
      child.emit('error', Object.assign(new Error(`the spawn server ended (${why}) before it answered`), { code: SPAWN_UNKNOWN }));
    }
    this.starting.clear();
    for (const child of this.running.values()) awaitGone(child);
    this.running.clear();
  }
}

/**
 * Emits `exit` (null, null) on `child` once its process no longer exists: its status went with
 * the server. (A pid reused within one poll would be waited for too: the call then ends later.)
 */
function awaitGone(child: ServedProcess): void {
  const timer = setInterval(() => {
    try {
      process.kill(child.pid!, 0);
    } catch {
      clearInterval(timer);
      child.stdin.destroy();
      child.emit('exit', null, null);
    }
  }, ORPHAN_POLL_MS);
}

function noNul(what: string, value: string): string {
  if (value.includes('\0')) throw new TypeError(`The ${what} must be a string without null bytes: ${JSON.stringify(value)}`);
  return value;
}

/** Body 'S' (see sbx-exec.c): id, uid, gid, counts, then cwd, the arguments and the environment, NUL-terminated. */
function spawnRequest(id: number, launcherArgs: string[], o: LaunchOptions): Buffer {
  const env = Object.entries(o.env).map(([k, v]) => `${noNul('variable name', k)}=${noNul(`value of ${k}`, v)}`);
  const strings = [noNul('cwd', o.cwd), ...launcherArgs.map((a) => noNul('argument', a)), ...env].join('\0') + '\0';
  const head = Buffer.alloc(4 + 21);
  const size = 21 + Buffer.byteLength(strings);
  if (size > MAX_REQUEST_BYTES)
    throw Object.assign(new RangeError(`spawn E2BIG: ${size} bytes of arguments and environment`), { code: 'E2BIG' });
  head.writeUInt32LE(size, 0);
  head.write('S', 4, 'latin1');
  head.writeUInt32LE(id, 5);
  head.writeUInt32LE(o.uid, 9);
  head.writeUInt32LE(o.gid, 13);
  head.writeUInt32LE(launcherArgs.length, 17);
  head.writeUInt32LE(env.length, 21);
  return Buffer.concat([head, Buffer.from(strings)]);
}

/** Body 'C': the agent holds its ends of call `id`'s pipes. */
function closeRequest(id: number): Buffer {
  const b = Buffer.alloc(9);
  b.writeUInt32LE(5, 0);
  b.write('C', 4, 'latin1');
  b.writeUInt32LE(id, 5);
  return b;
}
