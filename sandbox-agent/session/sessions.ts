/**
 * The shell sessions of this sandbox: the `session_start` tool (a background call that lives as
 * long as its shell), and `exec` with `session: ID` routed to that session's shell, one command
 * at a time in the order the calls came. A session ends when its `session_start` call is
 * cancelled (DELETE), after `idleTimeoutMs` without a command, or when its shell exits; its
 * whole process tree goes with it.
 */
import { errorInfo } from '../../contract/errors.js';
import type { ExecArgs } from '../../contract/tools/exec.js';
import { sessionStartSpec, type SessionStartArgs } from '../../contract/tools/session.js';
import { outcomeWithoutRun, type AgentTool, type AttemptContext, type AttemptOutcome } from '../execution/attempt.js';
import { toolUserEnv } from '../tools/exec.js';
import { runSessionCommand } from './session-command.js';
import { ShellSession } from './shell-session.js';

export interface ShellSessionsOptions {
  /** The shell sessions run (`detectShell()`: the image's bash, else its sh, else the runtime's busybox sh). */
  shell: string;
  /** A root-owned directory (mode 0711) for the sessions' FIFOs, one subdirectory each. */
  dir: string;
  /** The busybox whose `mkfifo` makes them. */
  busybox: string;
}

/** Why a session ended: its `session_start` call was cancelled, it was idle too long, or its shell exited. */
type EndReason = 'deleted' | 'idle' | 'exited';

interface Entry {
  shell: ShellSession;
  /** The tail of the session's command queue: each command waits for the one before. */
  turn: Promise<unknown>;
  queued: number;
  idleTimer: NodeJS.Timeout | null;
  idleTimeoutMs: number;
  onIdle: () => void;
}

export class ShellSessions {
  private readonly live = new Map<string, Entry>();
  private readonly ended = new Set<string>();

  constructor(private readonly options: ShellSessionsOptions) {}

  /** The `session_start` tool over this registry. */
  startTool(): AgentTool<SessionStartArgs> {
    return {
      name: sessionStartSpec.name,
      version: sessionStartSpec.version,
      parse: (args) => sessionStartSpec.args.parse(args),
      execute: (ctx, args) => this.start(ctx, args),
    };
  }

  /** `exec` with sessions: a call with `session` runs in that session's shell, any other in `exec`. */
  withSessions(exec: AgentTool<ExecArgs>): AgentTool<ExecArgs> {
    return {
      ...exec,
      execute: (ctx, args) => (args.session === undefined ? exec.execute(ctx, args) : this.command(ctx, args as never)),
    };
  }

  private async start(ctx: AttemptContext, args: SessionStartArgs): Promise<AttemptOutcome> {
    const startedAt = new Date();
    const { sessionId } = args;
    if (this.live.has(sessionId) || this.ended.has(sessionId)) {
      return outcomeWithoutRun('failed', 'not_started', errorInfo('input.invalid', `session ${sessionId} exists already`), startedAt);
    }
    const env = toolUserEnv(ctx, { ...ctx.leaseEnv, ...args.env });
    let shell: ShellSession;
    try {
      shell = await ShellSession.start({
        shell: this.options.shell,
        cwd: args.cwd ?? ctx.workdir,
        env,
        uid: ctx.toolUser.uid,
        gid: ctx.toolUser.gid,
        dir: `${this.options.dir}/${sessionId}`,
        busybox: this.options.busybox,
      });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const error =
        code === 'ENOENT' && args.cwd !== undefined
          ? errorInfo('input.cwd_not_found', `cwd does not exist: ${args.cwd}`, { cwd: args.cwd })
          : errorInfo('execution.spawn_failed', `could not start the session's shell: ${(err as Error).message}`);
      return outcomeWithoutRun('failed', 'not_started', error, startedAt);
    }
    ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid: shell.pid });
    // A background call: answers with its handle now; its tree is kept from sweeps as the session's.
    ctx.detach(shell.pid);
    ctx.processTrees.keep(shell.pid, { kind: 'session', id: sessionId });
    const reason = await new Promise<EndReason>((resolve) => {
      const entry: Entry = {
        shell,
        turn: Promise.resolve(),
        queued: 0,
        idleTimer: null,
        idleTimeoutMs: args.idleTimeoutMs,
        onIdle: () => resolve('idle'),
      };
      this.live.set(sessionId, entry);
      this.armIdle(entry);
      if (ctx.cancelSignal.aborted) resolve('deleted');
      ctx.cancelSignal.addEventListener('abort', () => resolve('deleted'), { once: true });
      void shell.exited.then(() => resolve('exited'));
    });
    const entry = this.live.get(sessionId)!;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
    this.live.delete(sessionId);
    this.ended.add(sessionId);
    await shell.kill();
    ctx.processTrees.release(shell.pid);
    const exit = await shell.exited;
    const endedAt = new Date();
    const base = {
      ...outcomeWithoutRun('succeeded', 'committed', errorInfo('execution.cancelled', ''), startedAt),
      endedAt,
      exit: { code: exit.code, signal: exit.signal, killedBy: reason === 'deleted' ? ('cancel' as const) : null },
      runner: { pid: shell.pid, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid },
      data: { sessionId, endedBy: reason },
    };
    if (reason === 'deleted') {
      const message = `session ${sessionId} deleted; its shell and every process it started were killed`;
      return { ...base, status: 'cancelled', error: errorInfo('execution.cancelled', message), modelText: message };
    }
    if (reason === 'idle') {
      const message = `session ${sessionId} ended after ${args.idleTimeoutMs} ms without a command`;
      const error = errorInfo('execution.timeout', message, { idleTimeoutMs: args.idleTimeoutMs });
      return { ...base, status: 'timed_out', error, modelText: message };
    }
    const message = `session ${sessionId} ended: its shell exited (${exit.code ?? exit.signal})`;
    return { ...base, status: 'succeeded', error: null, modelText: message };
  }

  private async command(ctx: AttemptContext, args: ExecArgs & { session: string; cmd: string }): Promise<AttemptOutcome> {
    const at = new Date();
    const entry = this.live.get(args.session);
    if (!entry) {
      const error = this.ended.has(args.session)
        ? errorInfo('session.ended', `session ${args.session} has ended`, { sessionId: args.session })
        : errorInfo('session.not_found', `no session ${args.session} in this sandbox`, { sessionId: args.session });
      return outcomeWithoutRun('failed', 'not_started', error, at);
    }
    // One command at a time, in the order the calls came.
    const previous = entry.turn;
    let done!: () => void;
    entry.turn = new Promise<void>((resolve) => (done = resolve));
    entry.queued += 1;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
    entry.idleTimer = null;
    try {
      await previous;
      if (this.live.get(args.session) !== entry) {
        return outcomeWithoutRun('failed', 'not_started', errorInfo('session.ended', `session ${args.session} has ended`), at);
      }
      return await runSessionCommand(ctx, args, entry.shell);
    } finally {
      entry.queued -= 1;
      done();
      this.armIdle(entry);
    }
  }

  private armIdle(entry: Entry): void {
    if (entry.queued > 0 || ![...this.live.values()].includes(entry)) return;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
    entry.idleTimer = setTimeout(entry.onIdle, entry.idleTimeoutMs);
  }
}
