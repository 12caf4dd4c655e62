/**
 * One command of a shell session as a call (`exec` with `session`): its output redacted,
 * counted, kept up to the limit and spooled like an exec's, its own exit code, timeout and cancel
 * as an interrupt of the foreground command (the session and its state stay), a receipt.
 */
import { errorInfo } from '../../contract/errors.js';
import type { ExecArgs } from '../../contract/tools/exec.js';
import { exitVerdict, outcomeWithoutRun, stoppedVerdict, type AttemptContext, type AttemptOutcome } from '../execution/attempt.js';
import { sweepProcesses } from '../host/process-sweep.js';
import { modelTextOf } from '../output/model-text.js';
import { OutputCapture } from '../output/output-capture.js';
import type { ShellSession } from './shell-session.js';

/** Runs `args.cmd` in `shell` (the caller holds the session's turn) and reports it as an attempt's outcome. */
export async function runSessionCommand(
  ctx: AttemptContext,
  args: ExecArgs & { session: string; cmd: string },
  shell: ShellSession,
): Promise<AttemptOutcome> {
  const startedAt = new Date();
  const combined = args.combinedOutput;
  const capture = new OutputCapture(ctx, { streams: ['stdout', 'stderr'], combined });

  let running;
  try {
    running = await shell.run(
      args.cmd,
      {
        write: (stream, data) => capture.write(stream, data),
        onDrain: (stream, resume) => capture.onDrain(stream, resume),
      },
      combined,
    );
  } catch (err) {
    await capture.discard();
    const at = new Date();
    const error = errorInfo('execution.spawn_failed', `could not start the command in the session: ${(err as Error).message}`);
    return outcomeWithoutRun('failed', 'not_started', error, at);
  }
  ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid: shell.pid });

  let killedBy: 'timeout' | 'cancel' | null = null;
  const stop = (reason: 'timeout' | 'cancel'): void => {
    if (killedBy) return;
    killedBy = reason;
    if (reason === 'timeout') ctx.emit({ type: 'call.timed_out', timeoutMs: ctx.timeoutMs });
    else ctx.emit({ type: 'call.cancel_acknowledged', attemptId: ctx.attemptId });
    running.interrupt(args.killGraceMs);
  };
  const timer = setTimeout(() => stop('timeout'), ctx.timeoutMs);
  const onCancel = (): void => stop('cancel');
  if (ctx.cancelSignal.aborted) onCancel();
  else ctx.cancelSignal.addEventListener('abort', onCancel, { once: true });
  const end = await running.done;
  clearTimeout(timer);
  ctx.cancelSignal.removeEventListener('abort', onCancel);
  // What left the session (setsid, daemons) goes, as after any foreground exec; the kept trees stay.
  const killedProcesses = await sweepProcesses(ctx.toolUser.uid, ctx.agentPids(), ctx.processTrees.sessionIds());

  const captured = await capture.finish();
  const { stdout: out, stderr: err } = captured.summaries;
  const endedAt = new Date();
  const base = {
    startedAt,
    endedAt,
    exit: { code: end.code, signal: end.signal, killedBy },
    environment: null,
    runner: { pid: shell.pid, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid },
    cleanup: { killedProcesses },
    versions: [],
    data: { sessionId: args.session, sessionEnded: end.shellExited },
    ...captured.fields,
    secretsUsed: [],
  };
  const text = (headline: string): string => modelTextOf(headline, out, err);
  const ended = end.shellExited ? '; the session has ended' : '';
  if (killedBy) {
    const how = killedBy === 'timeout' ? `timed out after ${ctx.timeoutMs} ms` : 'cancelled';
    const message = `${how}; the command was interrupted${ended || ', the session goes on'}`;
    return { ...base, ...stoppedVerdict(killedBy, message), modelText: text(message) };
  }
  const verdict = exitVerdict(end, { note: ended, killed: "the session's shell" });
  return { ...base, ...verdict, modelText: text(end.code === null ? verdict.error!.message : `exit ${end.code}${ended}`) };
}
