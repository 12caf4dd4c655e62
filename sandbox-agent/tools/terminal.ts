/**
 * The `terminal` tool: a program (default: the sandbox's shell as a login shell) on a
 * pseudo-terminal (node-pty: forkpty(3), so the program is a session leader with the terminal as
 * its controlling tty), as the tool user. It detaches at once — the call's handle is the
 * terminal's id — and lives until its program exits, a DELETE (cancel), the idle timeout or the
 * absolute timeout. Input, resizes and EOF arrive on the call's input stream (link/input-stream.ts).
 *
 * Output: every byte (redacted) is an `output` event on `stdout` up to `maxOutputBytes` (the
 * backlog a client can resume from), then `output.truncated`; the whole transcript goes to the
 * artifact `transcript.log` (sha256) up to the spool cap, `artifactTruncated` when even that was cut.
 *
 * Privileges: node-pty's child calls setgid and setuid but not setgroups, so the agent's own
 * supplementary groups (root's) would be inherited; they are set to the tool user's group for
 * the instant of the fork (synchronous) and put back.
 */
import { constants } from 'node:os';
import { createRequire } from 'node:module';
import type { IPty, IPtyForkOptions } from 'node-pty';
import { errorInfo } from '../../contract/errors.js';
import { MAX_TERMINAL_CELLS, terminalSpec, type TerminalArgs } from '../../contract/tools/terminal.js';
import {
  exitVerdict,
  outcomeWithoutRun,
  stoppedVerdict,
  type AgentTool,
  type AttemptContext,
  type AttemptOutcome,
} from '../execution/attempt.js';
import { signalSession } from '../host/session-kill.js';
import { killMarked, TREE_MARKER_VAR } from '../host/tree-marker.js';
import { OutputCapture } from '../output/output-capture.js';
import { checkCwd, EXEC_ENV_DEFAULTS, toolUserEnv } from './exec.js';
import { AGENT_RUNTIME_EXEC } from '../../contract/agent-runtime.js';
import { PtyInput } from './pty-input.js';

/** Time between SIGHUP (a terminal hung up) and SIGKILL of the terminal's session, ms. */
const HANGUP_GRACE_MS = 2000;
/** Input bytes that may wait for a program that does not read them (beyond: dropped, counted in the receipt). */
const MAX_PENDING_INPUT_BYTES = 4 * 1024 * 1024;
/** The EOF character of a terminal in canonical mode (^D). */
const EOF_CHAR = '\x04';

export const terminalTool: AgentTool<TerminalArgs> = {
  name: terminalSpec.name,
  version: terminalSpec.version,
  parse: (args) => terminalSpec.args.parse(args),
  execute: runTerminal,
};

const clampCells = (n: number): number => Math.min(MAX_TERMINAL_CELLS, Math.max(1, Math.trunc(n)));

/** The signal's name for its number (node-pty reports numbers), or null for 0. */
function signalName(n: number | undefined): NodeJS.Signals | null {
  if (!n) return null;
  const entry = Object.entries(constants.signals).find(([, v]) => v === n);
  return (entry?.[0] as NodeJS.Signals | undefined) ?? null;
}

/**
 * node-pty's spawn, loaded at the first terminal rather than at agent start: a native addon and its
 * JavaScript, which most leases never use (issue 14: the agent's start and memory). Throws when
 * the addon cannot be loaded (the terminal then fails `execution.spawn_failed`).
 */
let spawnPty: ((file: string, argv: string[], options: IPtyForkOptions) => IPty) | undefined;
function loadPty(): NonNullable<typeof spawnPty> {
  spawnPty ??= (createRequire(import.meta.url)('node-pty') as typeof import('node-pty')).spawn;
  return spawnPty;
}

/** Spawns on a pty as the tool user, with the supplementary groups of the tool user alone. */
function spawnAsToolUser(ctx: AttemptContext, file: string, argv: string[], options: IPtyForkOptions): IPty {
  const spawn = loadPty();
  const root = process.getuid?.() === 0;
  const groups = root ? process.getgroups!() : [];
  if (root) process.setgroups!([ctx.toolUser.gid]);
  try {
    return spawn(file, argv, root ? { ...options, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid } : options);
  } finally {
    if (root) process.setgroups!(groups);
  }
}

async function runTerminal(ctx: AttemptContext, args: TerminalArgs): Promise<AttemptOutcome> {
  const startedAt = new Date();
  const cwd = args.cwd ?? ctx.workdir;
  const cwdError = await checkCwd(cwd, ctx.toolUser);
  if (cwdError) return outcomeWithoutRun('failed', 'not_started', errorInfo('input.cwd_not_found', cwdError, { cwd }), startedAt);

  const userEnv = { ...ctx.leaseEnv, ...args.env };
  // Of exec's non-interactive defaults only LANG and PATH: a terminal is interactive (colour, a pager).
  const env = {
    ...toolUserEnv(
      ctx,
      userEnv,
      { LANG: EXEC_ENV_DEFAULTS.LANG!, PATH: EXEC_ENV_DEFAULTS.PATH! },
      { TERM: 'xterm-256color', SHELL: ctx.shell },
    ),
    // Last: what the terminal started is found by it also after setsid (host/tree-marker.ts).
    [TREE_MARKER_VAR]: ctx.callId,
  };
  // Through exec's launcher: the OOM killer takes the terminal's processes first; `cmd` runs in the sandbox's shell.
  const argv = ['--', ...(args.cmd !== undefined ? [ctx.shell, '-c', '--', args.cmd] : [ctx.shell, '-l'])];
  let pty: IPty;
  try {
    pty = spawnAsToolUser(ctx, AGENT_RUNTIME_EXEC, argv, {
      name: 'xterm-256color',
      cols: args.cols,
      rows: args.rows,
      cwd,
      env,
      encoding: null,
    });
  } catch (err) {
    return outcomeWithoutRun('failed', 'not_started', errorInfo('execution.spawn_failed', (err as Error).message), startedAt);
  }
  const pid = pty.pid;
  ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid });
  ctx.detach(pid);
  // Kept as the terminal's (detach kept it as a background call's): the sweep after an exec spares it.
  ctx.processTrees.keep(pid, { kind: 'terminal', id: ctx.callId });

  // Bytes published live so far: the same offsets as the output events, up to the same bound.
  let liveBytes = 0;
  const capture = new OutputCapture(ctx, {
    streams: ['stdout'],
    names: { stdout: 'transcript' },
    keepArtifact: 'always',
    // Keystroke echo is latency-bound: batches are flushed within a millisecond.
    batching: { flushIntervalMs: 1, maxBatchBytes: 32 * 1024 },
    // Attached clients get the bytes now, the ledger's events follow.
    onRedacted: (_stream, data) => {
      if (liveBytes + data.length <= ctx.maxOutputBytes) ctx.publishLive(liveBytes, data);
      liveBytes += data.length;
    },
  });

  let killedBy: 'timeout' | 'cancel' | null = null;
  let idle = false;
  let exited = false;
  let idleTimer: NodeJS.Timeout | null = null;
  let graceTimer: NodeJS.Timeout | null = null;
  const stop = (reason: 'timeout' | 'cancel' | 'idle'): void => {
    if (killedBy || exited) return;
    killedBy = reason === 'idle' ? 'timeout' : reason;
    idle = reason === 'idle';
    if (reason === 'cancel') ctx.emit({ type: 'call.cancel_acknowledged', attemptId: ctx.attemptId });
    else ctx.emit({ type: 'call.timed_out', timeoutMs: idle ? args.idleTimeoutMs : ctx.timeoutMs });
    // A terminal that goes away hangs up: SIGHUP to the whole session, then SIGKILL.
    void signalSession(pid, 'SIGHUP');
    graceTimer = setTimeout(() => void signalSession(pid, 'SIGKILL'), HANGUP_GRACE_MS);
  };
  const touch = (): void => {
    if (idleTimer) clearTimeout(idleTimer);
    idleTimer = setTimeout(() => stop('idle'), args.idleTimeoutMs);
  };
  touch();

  pty.onData((chunk: string | Buffer) => {
    touch();
    capture.write('stdout', Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk), pty);
  });
  // node-pty's master fd (a getter its typings leave out): written by a bounded writer of our own.
  const keys = new PtyInput((pty as unknown as { fd: number }).fd, MAX_PENDING_INPUT_BYTES);
  const input = ctx.openInput(ctx.callId, (message) => {
    if (exited) return;
    touch();
    try {
      if (message.kind === 'data') keys.write(Buffer.from(message.dataBase64, 'base64'));
      else if (message.kind === 'resize') pty.resize(clampCells(message.cols), clampCells(message.rows));
      else keys.write(Buffer.from(EOF_CHAR));
    } catch {
      // The pty closed between the exit and this message: nothing to write to.
    }
  });

  const absoluteTimer = setTimeout(() => stop('timeout'), ctx.timeoutMs);
  const onCancel = (): void => stop('cancel');
  if (ctx.cancelSignal.aborted) onCancel();
  else ctx.cancelSignal.addEventListener('abort', onCancel, { once: true });

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    pty.onExit(({ exitCode, signal }) => {
      const name = signalName(signal);
      resolve({ code: name ? null : exitCode, signal: name });
    });
  });
  exited = true;
  keys.close();
  clearTimeout(absoluteTimer);
  if (idleTimer) clearTimeout(idleTimer);
  if (graceTimer) clearTimeout(graceTimer);
  ctx.cancelSignal.removeEventListener('abort', onCancel);
  // What the program left in its session (a background job, a nohup) ends with it.
  // And what left the session (setsid, a daemon), found by the variable it inherited.
  const killedProcesses = (await signalSession(pid, 'SIGKILL')) + (await killMarked(ctx.callId, ctx.toolUser));
  ctx.processTrees.release(pid);
  await input.close();
  const captured = await capture.finish();
  const transcript = captured.artifactOf.stdout!;
  const endedAt = new Date();
  const base = {
    startedAt,
    endedAt,
    exit: { code: exit.code, signal: exit.signal, killedBy },
    environment: {
      defaults: { TERM: 'xterm-256color', ...ctx.networkEnv },
      keys: [...new Set([...Object.keys(ctx.imageEnv), ...Object.keys(userEnv)])].sort(),
    },
    runner: { pid, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid },
    cleanup: { killedProcesses },
    versions: [],
    data: {
      terminalId: ctx.callId,
      pid,
      inputDroppedBytes: keys.droppedBytes,
      transcript: {
        artifactId: transcript.artifact.id,
        sha256: transcript.artifact.sha256,
        size: transcript.artifact.size,
        truncated: transcript.spoolTruncated,
      },
    },
    ...captured.fields,
    secretsUsed: [],
  };
  const ended = exit.signal ? `killed by ${exit.signal}` : `exit ${exit.code}`;
  const modelText = `terminal ${ctx.callId} ended (${ended}); transcript ${transcript.artifact.id} (${transcript.artifact.size} bytes)`;
  if (killedBy === 'cancel')
    return { ...base, ...stoppedVerdict('cancel', 'terminal closed; its session was hung up and killed'), modelText };
  if (killedBy === 'timeout') {
    const ms = idle ? args.idleTimeoutMs : ctx.timeoutMs;
    const why = idle ? `idle for ${ms} ms (no input or output)` : `open for ${ms} ms (the policy's maxDurationSeconds)`;
    const verdict = stoppedVerdict('timeout', `terminal ${why}; its session was hung up and killed`, { timeoutMs: ms, idle });
    return { ...base, ...verdict, modelText };
  }
  return { ...base, ...exitVerdict(exit), modelText };
}
