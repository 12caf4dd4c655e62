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
import { createHash } from 'node:crypto';
import { constants } from 'node:os';
import { spawn as spawnPty, type IPty } from 'node-pty';
import { errorInfo } from '../../contract/errors.js';
import type { StreamTruncation } from '../../contract/objects.js';
import { MAX_TERMINAL_CELLS, terminalSpec, type TerminalArgs } from '../../contract/tools/terminal.js';
import { outcomeWithoutRun, type AgentTool, type AttemptContext, type AttemptOutcome } from '../execution/attempt.js';
import { signalSession } from '../host/session-kill.js';
import { OutputPipeline } from '../output/output-pipeline.js';
import { StreamSpool } from '../output/spool.js';
import { checkCwd, EXEC_ENV_DEFAULTS, OOM_FIRST } from './exec.js';
import { PtyInput } from './pty-input.js';

/** Time between SIGHUP (a terminal hung up) and SIGKILL of the terminal's session, ms. */
const HANGUP_GRACE_MS = 2000;
/** Input bytes that may wait for a program that does not read them (beyond: dropped, counted in the receipt). */
const MAX_PENDING_INPUT_BYTES = 4 * 1024 * 1024;
/** The EOF character of a terminal in canonical mode (^D). */
const EOF_CHAR = '\x04';
/** A terminal has one output stream (stdout); stderr is written to the same terminal. */
const EMPTY_STREAM = { bytes: 0, sha256: createHash('sha256').digest('hex'), keptBytes: 0 };

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

/** Spawns on a pty as the tool user, with the supplementary groups of the tool user alone. */
function spawnAsToolUser(ctx: AttemptContext, file: string, argv: string[], options: Parameters<typeof spawnPty>[2]): IPty {
  const root = process.getuid?.() === 0;
  const groups = root ? process.getgroups!() : [];
  if (root) process.setgroups!([ctx.toolUser.gid]);
  try {
    return spawnPty(file, argv, root ? { ...options, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid } : options);
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
  const env: Record<string, string> = {
    LANG: EXEC_ENV_DEFAULTS.LANG!,
    PATH: EXEC_ENV_DEFAULTS.PATH!,
    ...ctx.imageEnv,
    ...ctx.networkEnv,
    TERM: 'xterm-256color',
    HOME: ctx.toolUser.home,
    USER: ctx.toolUser.name,
    LOGNAME: ctx.toolUser.name,
    SHELL: ctx.shell,
    ...userEnv,
  };
  // As exec: the OOM killer takes the terminal's processes first; `cmd` runs in the sandbox's shell.
  const argv =
    args.cmd !== undefined ? ['-c', `${OOM_FIRST} exec ${ctx.shell} -c -- "$0"`, args.cmd] : ['-c', `${OOM_FIRST} exec ${ctx.shell} -l`];
  let pty: IPty;
  try {
    pty = spawnAsToolUser(ctx, ctx.shell, argv, { name: 'xterm-256color', cols: args.cols, rows: args.rows, cwd, env, encoding: null });
  } catch (err) {
    return outcomeWithoutRun('failed', 'not_started', errorInfo('execution.spawn_failed', (err as Error).message), startedAt);
  }
  const pid = pty.pid;
  ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid });
  ctx.detach(pid);
  // Kept as the terminal's (detach kept it as a background call's): the sweep after an exec spares it.
  ctx.processTrees.keep(pid, { kind: 'terminal', id: ctx.callId });

  const pipeline = new OutputPipeline(
    {
      chunk: (stream, offset, data) => ctx.emit({ type: 'output', stream, offset, dataBase64: data.toString('base64') }),
      truncated: (stream, keptBytes) => ctx.emit({ type: 'output.truncated', stream, keptBytes }),
    },
    // Keystroke echo is latency-bound: batches are flushed within a millisecond.
    { maxKeptBytes: ctx.maxOutputBytes, flushIntervalMs: 1, maxBatchBytes: 32 * 1024 },
  );
  const spool = new StreamSpool(ctx.spool.dir, `${ctx.attemptId}.transcript`, ctx.spool.maxArtifactBytes, ctx.spool.budget);
  const redactor = ctx.secrets.redaction.stream();

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

  // Bytes published live so far: the same offsets as the output events, up to the same bound.
  let liveBytes = 0;
  pty.onData((chunk: string | Buffer) => {
    touch();
    const data = redactor.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    if (data.length === 0) return;
    // Keystroke echo is latency-bound: attached clients get the bytes now, the ledger's events follow.
    if (liveBytes + data.length <= ctx.maxOutputBytes) ctx.publishLive(liveBytes, data);
    liveBytes += data.length;
    pipeline.write('stdout', data);
    if (!spool.write(data)) {
      pty.pause();
      spool.onDrain(() => pty.resume());
    }
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
  const killedProcesses = await signalSession(pid, 'SIGKILL');
  ctx.processTrees.release(pid);
  await input.close();
  const rest = redactor.end();
  if (rest.length > 0) {
    pipeline.write('stdout', rest);
    spool.write(rest);
  }
  pipeline.flush();
  await spool.close();
  const summary = pipeline.summary('stdout');
  let transcript: { id: string; sha256: string; size: number };
  try {
    transcript = await ctx.uploadArtifact(spool.path, 'transcript.log', 'application/octet-stream');
  } finally {
    await spool.remove();
  }
  const truncation: StreamTruncation | null =
    summary.keptBytes === summary.bytes
      ? null
      : {
          truncated: true,
          originalBytes: summary.bytes,
          keptBytes: summary.keptBytes,
          strategy: 'head',
          fullArtifact: transcript.id,
          artifactTruncated: spool.truncated,
        };
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
      transcript: { artifactId: transcript.id, sha256: transcript.sha256, size: transcript.size, truncated: spool.truncated },
    },
    outputs: { stdout: { bytes: summary.bytes, sha256: summary.sha256, keptBytes: summary.keptBytes }, stderr: EMPTY_STREAM },
    stdout: summary.kept.toString('utf8'),
    stderr: '',
    truncation: truncation ? { stdout: truncation, stderr: null } : null,
    artifacts: [transcript],
    secretsUsed: [],
  };
  const ended = exit.signal ? `killed by ${exit.signal}` : `exit ${exit.code}`;
  const modelText = `terminal ${ctx.callId} ended (${ended}); transcript ${transcript.id} (${transcript.size} bytes)`;
  if (killedBy === 'cancel') {
    return {
      ...base,
      status: 'cancelled',
      commitState: 'unknown',
      error: errorInfo('execution.cancelled', 'terminal closed; its session was hung up and killed'),
      modelText,
    };
  }
  if (killedBy === 'timeout') {
    const ms = idle ? args.idleTimeoutMs : ctx.timeoutMs;
    const why = idle ? `idle for ${ms} ms (no input or output)` : `open for ${ms} ms (the policy's maxDurationSeconds)`;
    return {
      ...base,
      status: 'timed_out',
      commitState: 'unknown',
      error: errorInfo('execution.timeout', `terminal ${why}; its session was hung up and killed`, { timeoutMs: ms, idle }),
      modelText,
    };
  }
  if (exit.code === 0) return { ...base, status: 'succeeded', commitState: 'committed', error: null, modelText };
  if (exit.code !== null) {
    return {
      ...base,
      status: 'failed',
      commitState: 'committed',
      error: errorInfo('execution.nonzero_exit', `exited with code ${exit.code}`, { exitCode: exit.code }),
      modelText,
    };
  }
  return {
    ...base,
    status: 'failed',
    commitState: 'unknown',
    error: errorInfo('execution.signaled', `killed by ${exit.signal}`, { signal: exit.signal }),
    modelText,
  };
}
