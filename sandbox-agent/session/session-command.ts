/**
 * One command of a shell session as a call (`exec` with `session`): its output redacted,
 * counted, kept up to the limit and spooled like an exec's, its own exit code, timeout and cancel
 * as an interrupt of the foreground command (the session and its state stay), a receipt.
 */
import { errorInfo } from '../../contract/errors.js';
import type { StreamTruncation } from '../../contract/objects.js';
import type { ExecArgs } from '../../contract/tools/exec.js';
import { outcomeWithoutRun, type AttemptContext, type AttemptOutcome } from '../execution/attempt.js';
import { sweepProcesses } from '../host/process-sweep.js';
import { modelTextOf } from '../output/model-text.js';
import { OutputPipeline, type StreamSummary } from '../output/output-pipeline.js';
import { StreamSpool } from '../output/spool.js';
import type { ShellSession } from './shell-session.js';

type Stream = 'stdout' | 'stderr';

/** Runs `args.cmd` in `shell` (the caller holds the session's turn) and reports it as an attempt's outcome. */
export async function runSessionCommand(
  ctx: AttemptContext,
  args: ExecArgs & { session: string; cmd: string },
  shell: ShellSession,
): Promise<AttemptOutcome> {
  const startedAt = new Date();
  const combined = args.combinedOutput;
  const mark = combined ? { combined: true as const } : {};
  const pipeline = new OutputPipeline(
    {
      chunk: (stream, offset, data) => ctx.emit({ type: 'output', stream, offset, dataBase64: data.toString('base64'), ...mark }),
      truncated: (stream, keptBytes) => ctx.emit({ type: 'output.truncated', stream, keptBytes, ...mark }),
    },
    { maxKeptBytes: ctx.maxOutputBytes },
  );
  const spools = {
    stdout: new StreamSpool(ctx.spool.dir, `${ctx.attemptId}.stdout`, ctx.spool.maxArtifactBytes, ctx.spool.budget),
    stderr: new StreamSpool(ctx.spool.dir, `${ctx.attemptId}.stderr`, ctx.spool.maxArtifactBytes, ctx.spool.budget),
  };
  const redactors = { stdout: ctx.secrets.redaction.stream(), stderr: ctx.secrets.redaction.stream() };
  const forward = (stream: Stream, data: Buffer): boolean => {
    if (data.length === 0) return true;
    pipeline.write(stream, data);
    return spools[stream].write(data);
  };

  let running;
  try {
    running = await shell.run(
      args.cmd,
      {
        write: (stream, data) => forward(stream, redactors[stream].push(data)),
        onDrain: (stream, resume) => spools[stream].onDrain(resume),
      },
      combined,
    );
  } catch (err) {
    await Promise.all([spools.stdout.remove(), spools.stderr.remove()]);
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

  for (const stream of ['stdout', 'stderr'] as const) forward(stream, redactors[stream].end());
  pipeline.flush();
  await Promise.all([spools.stdout.close(), spools.stderr.close()]);
  const out = pipeline.summary('stdout');
  const err = pipeline.summary('stderr');
  const artifacts: NonNullable<AttemptOutcome['artifacts']> = [];
  const truncationOf = async (stream: Stream, s: StreamSummary): Promise<StreamTruncation | null> => {
    if (s.keptBytes === s.bytes) {
      await spools[stream].remove();
      return null;
    }
    let artifact;
    try {
      artifact = await ctx.uploadArtifact(spools[stream].path, `${stream}.log`, 'application/octet-stream');
      artifacts.push(artifact);
    } finally {
      await spools[stream].remove();
    }
    return {
      truncated: true,
      originalBytes: s.bytes,
      keptBytes: s.keptBytes,
      strategy: 'head',
      fullArtifact: artifact.id,
      artifactTruncated: spools[stream].truncated,
    };
  };
  const truncationStdout = await truncationOf('stdout', out);
  const truncationStderr = await truncationOf('stderr', err);
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
    outputs: {
      stdout: { bytes: out.bytes, sha256: out.sha256, keptBytes: out.keptBytes },
      stderr: { bytes: err.bytes, sha256: err.sha256, keptBytes: err.keptBytes },
      ...(combined ? { combined: true } : {}),
    },
    stdout: out.kept.toString('utf8'),
    stderr: err.kept.toString('utf8'),
    truncation: truncationStdout || truncationStderr ? { stdout: truncationStdout, stderr: truncationStderr } : null,
    artifacts,
    secretsUsed: [],
  };
  const text = (headline: string): string => modelTextOf(headline, out, err);
  const ended = end.shellExited ? '; the session has ended' : '';
  if (killedBy === 'timeout') {
    const message = `timed out after ${ctx.timeoutMs} ms; the command was interrupted${ended || ', the session goes on'}`;
    return {
      ...base,
      status: 'timed_out',
      commitState: 'unknown',
      error: errorInfo('execution.timeout', message),
      modelText: text(message),
    };
  }
  if (killedBy === 'cancel') {
    const message = `cancelled; the command was interrupted${ended || ', the session goes on'}`;
    return {
      ...base,
      status: 'cancelled',
      commitState: 'unknown',
      error: errorInfo('execution.cancelled', message),
      modelText: text(message),
    };
  }
  if (end.code === 0) return { ...base, status: 'succeeded', commitState: 'committed', error: null, modelText: text(`exit 0${ended}`) };
  if (end.code !== null) {
    const error = errorInfo('execution.nonzero_exit', `exited with code ${end.code}${ended}`, { exitCode: end.code });
    return { ...base, status: 'failed', commitState: 'committed', error, modelText: text(`exit ${end.code}${ended}`) };
  }
  const error = errorInfo('execution.signaled', `the session's shell was killed by ${end.signal}`, { signal: end.signal });
  return { ...base, status: 'failed', commitState: 'unknown', error, modelText: text(error.message) };
}
