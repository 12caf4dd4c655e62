/**
 * The `exec` tool: runs a program as the policy's tool user in its own process group, streams
 * its output, and enforces `timeoutMs` and cancellation on the whole group.
 *
 * Process-group kill: the child is spawned with `detached: true`, i.e. setsid(2), so its pid is
 * also its process-group id and `kill(-pid, sig)` reaches every process that stayed in the group
 * (children and grandchildren alike), see kill(2).
 */
import { statSync } from 'node:fs';
import { errorInfo } from '../../contract/errors.js';
import type { EffectReceipt } from '../../contract/objects.js';
import type { AgentConfig } from '../../contract/queue.js';
import { execSpec, type ExecArgs } from '../../contract/tools/exec.js';
import {
  exitVerdict,
  outcomeWithoutRun,
  stoppedVerdict,
  type AgentTool,
  type AttemptContext,
  type AttemptOutcome,
} from '../execution/attempt.js';
import type { ProvidedSecrets } from '../host/secrets.js';
import { modelTextOf } from '../output/model-text.js';
import { OutputCapture } from '../output/output-capture.js';
import { readCgroupCounters, rose } from '../host/cgroup-counters.js';
import { SPAWN_UNKNOWN, type LaunchedProcess } from '../host/tool-spawner.js';
import { killProcessGroup, signalGroup, sweepProcesses } from '../host/process-sweep.js';

/** Environment every exec gets, so tools behave non-interactively; recorded in the receipt. */
export const EXEC_ENV_DEFAULTS: Readonly<Record<string, string>> = {
  NO_COLOR: '1',
  TERM: 'dumb',
  GIT_TERMINAL_PROMPT: '0',
  PAGER: 'cat',
  GIT_PAGER: 'cat',
  LANG: 'C.UTF-8',
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
};

/** The PATH the tools run with: the image's, else the default one. */
export function toolsPath(config: Pick<AgentConfig, 'imageEnv'>): string {
  return config.imageEnv.PATH ?? EXEC_ENV_DEFAULTS.PATH!;
}

/**
 * The environment a program of the tool user runs with (exec, a session's shell, a terminal),
 * from the weakest to the strongest: `defaults`, the image's Env (its PATH, PYTHONPATH, a conda
 * prefix), sbx's own (the egress proxy variables, `extra`, the tool user's HOME, USER and
 * LOGNAME), then `userEnv` (the lease's and the call's variables).
 */
export function toolUserEnv(
  ctx: Pick<AttemptContext, 'imageEnv' | 'networkEnv' | 'toolUser'>,
  userEnv: Record<string, string>,
  defaults: Readonly<Record<string, string>> = EXEC_ENV_DEFAULTS,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    ...defaults,
    ...ctx.imageEnv,
    ...ctx.networkEnv,
    ...extra,
    HOME: ctx.toolUser.home,
    USER: ctx.toolUser.name,
    LOGNAME: ctx.toolUser.name,
    ...userEnv,
  };
}

/** The `stdin` value that keeps stdin open for `POST .../calls/:callId/stdin`. */
export const PIPE_STDIN = 'pipe';

/**
 * Writes the call's input stream to the child's stdin in order; `eof` ends it. Paced (the next message once the
 * write's callback ran, also on EPIPE): bytes the program does not read wait in Redis under the call's budget.
 */
function pipeStdin(ctx: AttemptContext, child: LaunchedProcess): { close(): Promise<void> } {
  return ctx.openInput(ctx.callId, (message) => {
    if (child.stdin.writableEnded || child.stdin.destroyed) return Promise.resolve();
    if (message.kind === 'eof') child.stdin.end();
    if (message.kind !== 'data') return Promise.resolve();
    return new Promise<void>((resolve) => child.stdin.write(Buffer.from(message.dataBase64, 'base64'), () => resolve()));
  });
}

/** After the main process exits, how long to wait for its pipes to close, ms. */
const DRAIN_AFTER_EXIT_MS = 500;

export const execTool: AgentTool<ExecArgs> = {
  name: execSpec.name,
  version: execSpec.version,
  parse: (args) => execSpec.args.parse(args),
  execute: runExec,
};

async function runExec(ctx: AttemptContext, args: ExecArgs): Promise<AttemptOutcome> {
  const startedAt = new Date();
  const cwd = args.cwd ?? ctx.workdir;
  const cwdError = await checkCwd(cwd, ctx.toolUser);
  if (cwdError) return outcomeWithoutRun('failed', 'not_started', errorInfo('input.cwd_not_found', cwdError, { cwd }), startedAt);

  let provided;
  try {
    provided = await ctx.secrets.provide(args.secrets ?? []);
  } catch (err) {
    // A secret file could not be written (the secrets tmpfs full or missing): nothing ran.
    return outcomeWithoutRun(
      'failed',
      'not_started',
      errorInfo('execution.spawn_failed', `could not deliver the call's secrets: ${(err as Error).message}`),
      startedAt,
    );
  }
  if (!('release' in provided)) return outcomeWithoutRun('denied', 'not_started', provided, startedAt);
  try {
    return await runWithSecrets(ctx, args, cwd, startedAt, provided);
  } finally {
    // The call's processes are gone (killed and swept, or detached ones ended): its files go.
    await provided.release();
  }
}

async function runWithSecrets(
  ctx: AttemptContext,
  args: ExecArgs,
  cwd: string,
  startedAt: Date,
  provided: ProvidedSecrets,
): Promise<AttemptOutcome> {
  // A secret's variable wins over a lease or call variable of the same name: it was asked for by name.
  const userEnv = { ...ctx.leaseEnv, ...args.env, ...provided.env };
  const env = toolUserEnv(ctx, userEnv);
  // The image's variables are named, not valued, like the lease's (the manifest has their names too).
  const imageKeys = Object.keys(ctx.imageEnv);
  const defaults = Object.fromEntries(Object.entries(EXEC_ENV_DEFAULTS).filter(([k]) => !imageKeys.includes(k)));
  const environment: EffectReceipt['environment'] = {
    defaults: { ...defaults, ...ctx.networkEnv },
    keys: [...new Set([...imageKeys, ...Object.keys(userEnv)])].sort(),
  };
  // The program starts through the runtime's launcher (images/runtime/sbx-exec.c), which makes
  // the tool's processes the first the kernel's OOM killer takes (oom_score_adj 1000, inherited),
  // so a memory hog cannot take the agent down with it, and for combinedOutput makes stderr a
  // copy of stdout's pipe so both land in one stream in write order. argv is exec'd directly (a
  // missing program: 127); `cmd` runs in the image's bash, else its sh, else the runtime's
  // busybox sh (ctx.shell; the manifest's `shell` says which).
  // A script without `#!` runs in the sandbox's shell, as it did when a shell exec'd the program.
  const launcherArgs = [...(args.combinedOutput ? ['--stderr-to-stdout'] : []), '--shell', ctx.shell, '--'];
  const programArgs = args.cmd !== undefined ? [ctx.shell, '-c', '--', args.cmd] : args.argv!;

  // Before the program starts, so that what it causes is counted after it; read again only for a failure.
  const countersBefore = readCgroupCounters();
  let child: LaunchedProcess;
  try {
    // Its own session and process group (setsid), as the tool user (host/tool-spawner.ts).
    child = ctx.launch([...launcherArgs, ...programArgs], { cwd, env, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid });
  } catch (err) {
    // spawn throws synchronously for some execve failures (E2BIG, EINVAL): nothing ran.
    return outcomeWithoutRun('failed', 'not_started', errorInfo('execution.spawn_failed', (err as Error).message), startedAt);
  }

  const spawnError = await new Promise<Error | null>((resolve) => {
    child.once('spawn', () => resolve(null));
    child.once('error', (err) => resolve(err));
  });
  if (spawnError && (spawnError as NodeJS.ErrnoException).code === SPAWN_UNKNOWN) {
    const error = errorInfo('execution.effect_unknown', `whether the program started is unknown: ${spawnError.message}`);
    return outcomeWithoutRun('effect_unknown', 'unknown', error, startedAt);
  }
  if (spawnError) return outcomeWithoutRun('failed', 'not_started', errorInfo('execution.spawn_failed', spawnError.message), startedAt);

  const pid = child.pid!;
  ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid });
  if (args.background) ctx.detach(pid);
  // A foreground call's processes are reported as its own while it runs (the process list); not kept from the sweep.
  const unattribute = args.background ? () => undefined : ctx.processTrees.attribute(pid, { kind: 'call', id: ctx.callId });

  child.stdin.on('error', () => {
    // EPIPE: the program exited or closed stdin before reading all of it; not a failure of exec.
  });
  // `stdin: "pipe"`: bytes arrive in order on the call's input stream until `eof` (or the exit).
  const input = args.stdin === PIPE_STDIN ? pipeStdin(ctx, child) : (child.stdin.end(args.stdin ?? ''), null);
  // Every byte is redacted first (each secret value of the lease becomes [REDACTED:name], also
  // split across reads), then counted and hashed and spooled up to the artifact cap: nothing
  // downstream ever holds a value. When the spool's buffer is full the pipe is paused until it
  // drains, so memory stays bounded.
  const capture = new OutputCapture(ctx, { streams: ['stdout', 'stderr'], combined: args.combinedOutput });
  for (const stream of ['stdout', 'stderr'] as const) {
    const source = child[stream];
    source.on('data', (d: Buffer) => capture.write(stream, d, source));
  }

  let killedBy: 'timeout' | 'cancel' | null = null;
  let graceTimer: NodeJS.Timeout | null = null;
  const stop = (reason: 'timeout' | 'cancel'): void => {
    if (killedBy) return;
    killedBy = reason;
    if (reason === 'timeout') ctx.emit({ type: 'call.timed_out', timeoutMs: ctx.timeoutMs });
    else ctx.emit({ type: 'call.cancel_acknowledged', attemptId: ctx.attemptId });
    signalGroup(pid, 'SIGTERM');
    graceTimer = setTimeout(() => signalGroup(pid, 'SIGKILL'), args.killGraceMs);
  };
  const timeoutTimer = setTimeout(() => stop('timeout'), ctx.timeoutMs);
  const onCancel = (): void => stop('cancel');
  if (ctx.cancelSignal.aborted) onCancel();
  else ctx.cancelSignal.addEventListener('abort', onCancel, { once: true });

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  clearTimeout(timeoutTimer);
  ctx.cancelSignal.removeEventListener('abort', onCancel);
  await input?.close();
  // The call ends with its main process: whatever it left running goes too, in its group or
  // not (setsid, daemons), so nothing outlives the call, holds its pipes or sees later calls.
  // The receipt counts both: what was left in the group and what the sweep found outside it.
  if (graceTimer) clearTimeout(graceTimer);
  unattribute();
  const killedInGroup = await killProcessGroup(pid);
  // A background task ends while other calls may run: it takes only its own group with it. A
  // foreground call runs alone (it declares access to everything) and sweeps, sparing the agent's
  // worker, running background tasks and the group just killed (counted already).
  const spared = new Set([...ctx.agentPids(), ...killedInGroup]);
  const killedProcesses =
    killedInGroup.length + (args.background ? 0 : await sweepProcesses(ctx.toolUser.uid, spared, ctx.processTrees.sessionIds()));
  await drain(child.stdout, child.stderr);
  // A stream cut in the result goes whole (up to the cap) to an artifact; the rest of the spool goes.
  const captured = await capture.finish();
  const { stdout: out, stderr: err } = captured.summaries;
  const endedAt = new Date();
  const stderr = captured.fields.stderr;
  const base = {
    startedAt,
    endedAt,
    exit: { code: exit.code, signal: exit.signal, killedBy },
    environment,
    runner: { pid, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid },
    cleanup: { killedProcesses },
    versions: [],
    data: null,
    ...captured.fields,
    secretsUsed: provided.names,
  };
  const modelText = (headline: string): string => modelTextOf(headline, out, err);
  const durationText = `${endedAt.getTime() - startedAt.getTime()} ms`;

  if (killedBy === 'timeout') {
    return {
      ...base,
      ...stoppedVerdict('timeout', `timed out after ${ctx.timeoutMs} ms; process group killed`, { timeoutMs: ctx.timeoutMs }),
      modelText: modelText(`timed out after ${ctx.timeoutMs} ms (effects may be partial)`),
    };
  }
  if (killedBy === 'cancel') {
    return {
      ...base,
      ...stoppedVerdict('cancel', 'cancelled while running; process group killed'),
      modelText: modelText('cancelled while running (effects may be partial)'),
    };
  }
  if (exit.code === null && exit.signal === null) {
    // The spawn server that started the program ended before it did: its exit status is lost.
    const error = errorInfo('execution.effect_unknown', "the program's exit status was lost: the agent's spawn server ended while it ran");
    return { ...base, status: 'effect_unknown', commitState: 'unknown', error, modelText: modelText('exit status unknown') };
  }
  const ended = exit.code === null ? `killed by ${exit.signal}` : `exit ${exit.code} in ${durationText}`;
  const exited = (): AttemptOutcome => ({ ...base, ...exitVerdict(exit), modelText: modelText(ended) });
  // A clean exit needs no explanation: the cgroup's counters are read only for a failure.
  if (exit.code === 0) return exited();
  // Why a command failed, when the cgroup or the OS says more than its exit status does.
  const countersAfter = readCgroupCounters();
  // A shell (a `cmd`) reports a child killed by SIGKILL as exit 128+9 = 137.
  if ((exit.signal === 'SIGKILL' || exit.code === 137) && rose(countersBefore, countersAfter, 'oomKills')) {
    return {
      ...base,
      status: 'failed',
      commitState: 'unknown',
      error: errorInfo('execution.oom_killed', 'killed by the kernel for memory (the sandbox memory limit)', { signal: exit.signal }),
      modelText: modelText('killed for memory (out of memory in the sandbox)'),
    };
  }
  if (exit.code !== 0 && rose(countersBefore, countersAfter, 'pidsRefused')) {
    return {
      ...base,
      status: 'failed',
      commitState: 'committed',
      error: errorInfo(
        'resource.pids_exhausted',
        `exited with ${exit.code ?? exit.signal} after the sandbox process limit refused a fork`,
        { exitCode: exit.code },
      ),
      modelText: modelText(`exit ${exit.code ?? exit.signal}: process limit reached`),
    };
  }
  if (exit.code !== null && exit.code !== 0 && /No space left on device/.test(`${stderr}\n${err.tail.toString('utf8')}`)) {
    return {
      ...base,
      status: 'failed',
      commitState: 'committed',
      error: errorInfo('resource.disk_full', `exited with ${exit.code}: a writable root is full (ENOSPC)`, { exitCode: exit.code }),
      modelText: modelText(`exit ${exit.code}: no space left on device`),
    };
  }
  return exited();
}

/**
 * Why the tool user cannot work in `cwd`, or null. Checked here because the child changes
 * directory before it drops to the tool user (libuv), so a directory only root may enter would
 * otherwise be accepted. Permission rule: search (x) on every directory of the path for the
 * owner, group or others class the user falls in (path_resolution(7)). Synchronous stats: a
 * few of them cost less than one trip each through libuv's thread pool, on every exec's path.
 */
export async function checkCwd(cwd: string, user: { uid: number; gid: number }): Promise<string | null> {
  const parts = cwd.split('/').filter(Boolean);
  for (let i = 0; i <= parts.length; i += 1) {
    const dir = `/${parts.slice(0, i).join('/')}`;
    let s;
    try {
      s = statSync(dir);
    } catch (err) {
      return `cwd does not exist: ${cwd} (${(err as NodeJS.ErrnoException).code ?? 'error'} at ${dir})`;
    }
    if (!s.isDirectory()) return `cwd is not a directory: ${dir}`;
    const bit = s.uid === user.uid ? 0o100 : s.gid === user.gid ? 0o010 : 0o001;
    if ((s.mode & bit) === 0) return `cwd is not accessible to the tool user: ${cwd} (EACCES at ${dir})`;
  }
  return null;
}

function drain(...streams: NodeJS.ReadableStream[]): Promise<void> {
  const closed = streams.map(
    (s) =>
      new Promise<void>((resolve) => {
        const r = s as NodeJS.ReadableStream & { closed?: boolean; once(ev: string, fn: () => void): void };
        if (r.closed) resolve();
        else r.once('close', () => resolve());
      }),
  );
  return Promise.race([Promise.all(closed).then(() => undefined), new Promise<void>((r) => setTimeout(r, DRAIN_AFTER_EXIT_MS))]).then(
    () => {
      for (const s of streams) (s as NodeJS.ReadableStream & { destroy(): void }).destroy();
    },
  );
}
