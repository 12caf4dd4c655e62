/**
 * `list_processes` and `signal_process`, run by the agent itself (root, in the sandbox's pid
 * namespace): the list reads /proc (host/process-table.ts) and names what each process belongs
 * to by its session id (host/process-trees.ts: background calls, sessions, terminals, and the
 * foreground exec running now). A signal reaches only the tool user's processes: init, the
 * agent, its tool-user worker, another user's processes and what a `docker exec` started (the
 * files API's transfers) are listed with `killable: false` and refused (`process.not_killable`).
 *
 * Both declare no access, so they run beside a running exec. The signal is a call like any
 * other: intent first, then the attempt, then a receipt (the process as it was when signalled).
 * Between the check and kill(2) the pid could be reused by a new process; the check is repeated
 * right before the signal, which leaves only that narrow window (Node offers no pidfd).
 */
import { errorInfo, type ErrorCode } from '../../contract/errors.js';
import type { ListProcessesArgs, ProcessInfo, SignalProcessArgs } from '../../contract/tools.js';
import { listProcessesSpec, signalProcessSpec } from '../../contract/tools/processes.js';
import type { AgentTool, AttemptContext, AttemptOutcome } from '../execution/attempt.js';
import { readProcess, readProcessTable, startedFromOutside, type ProcessEntry } from '../host/process-table.js';

/** Why `entry` may not be signalled, or null when it may. */
function refusal(entry: ProcessEntry, ctx: AttemptContext, byPid: ReadonlyMap<number, ProcessEntry>): string | null {
  if (entry.pid === 1) return 'init (the sandbox pid 1)';
  if (entry.pid === process.pid) return 'the sbx agent';
  if (ctx.agentPids().has(entry.pid))
    return /(^|\/)sbx-inotify(\s|$)/.test(entry.command) ? "the agent's file-watch helper (sbx-inotify)" : "the agent's tool-user worker";
  if (entry.uid !== ctx.toolUser.uid) return `a process of ${entry.user}, not of the tool user ${ctx.toolUser.name}`;
  if (ctx.processTrees.belongsTo(entry.sid)?.kind === 'transfer') return 'a transfer of the files API';
  if (startedFromOutside(entry.pid, byPid)) return 'a process started from outside the sandbox (docker exec)';
  return null;
}

function info(entry: ProcessEntry, ctx: AttemptContext, byPid: ReadonlyMap<number, ProcessEntry>): ProcessInfo {
  const owner = ctx.processTrees.belongsTo(entry.sid);
  return {
    pid: entry.pid,
    ppid: entry.ppid,
    user: entry.user,
    uid: entry.uid,
    command: entry.command,
    sid: entry.sid,
    state: entry.state,
    owner: owner ? { kind: owner.kind, id: owner.id } : null,
    cpuTimeMs: entry.cpuTimeMs,
    rssBytes: entry.rssBytes,
    killable: refusal(entry, ctx, byPid) === null,
  };
}

const byPidOf = (entries: ProcessEntry[]): Map<number, ProcessEntry> => new Map(entries.map((e) => [e.pid, e]));

function outcome(
  startedAt: Date,
  fields: Pick<AttemptOutcome, 'status' | 'error' | 'commitState' | 'data' | 'modelText'>,
  ctx: AttemptContext,
): AttemptOutcome {
  return {
    startedAt,
    endedAt: new Date(),
    exit: null,
    environment: null,
    runner: { pid: process.pid, uid: 0, gid: 0 },
    outputs: null,
    cleanup: null,
    versions: [],
    stdout: '',
    stderr: '',
    truncation: null,
    ...fields,
    modelText: ctx.secrets.redaction.redactText(fields.modelText),
  };
}

function failed(startedAt: Date, ctx: AttemptContext, code: ErrorCode, message: string, details: Record<string, unknown>): AttemptOutcome {
  const error = errorInfo(code, message, details);
  return outcome(startedAt, { status: 'failed', error, commitState: 'not_started', data: null, modelText: `${code}: ${message}` }, ctx);
}

export const listProcessesTool: AgentTool<ListProcessesArgs> = {
  name: listProcessesSpec.name,
  version: listProcessesSpec.version,
  parse: (args) => listProcessesSpec.args.parse(args),
  async execute(ctx): Promise<AttemptOutcome> {
    const startedAt = new Date();
    ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid: process.pid });
    const entries = await readProcessTable();
    const byPid = byPidOf(entries);
    const processes = entries.map((e) => info(e, ctx, byPid));
    const lines = processes.map(
      (p) => `${p.pid} ${p.ppid} ${p.user} ${p.owner ? `${p.owner.kind}:${p.owner.id}` : '-'} ${p.killable ? 'k' : '-'} ${p.command}`,
    );
    // Command lines may carry a secret a call passed as an argument: redacted like output.
    const data = ctx.secrets.redaction.redactDeep({ processes });
    return outcome(
      startedAt,
      {
        status: 'succeeded',
        error: null,
        commitState: 'committed',
        data,
        modelText: `${processes.length} processes (pid ppid user owner killable command):\n${lines.join('\n')}`,
      },
      ctx,
    );
  },
};

export const signalProcessTool: AgentTool<SignalProcessArgs> = {
  name: signalProcessSpec.name,
  version: signalProcessSpec.version,
  parse: (args) => signalProcessSpec.args.parse(args),
  async execute(ctx, args): Promise<AttemptOutcome> {
    const startedAt = new Date();
    ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid: process.pid });
    const entries = await readProcessTable();
    const byPid = byPidOf(entries);
    const entry = byPid.get(args.pid);
    if (!entry) return failed(startedAt, ctx, 'process.not_found', `no process ${args.pid} in the sandbox`, { pid: args.pid });
    const why = refusal(entry, ctx, byPid);
    if (why)
      return failed(startedAt, ctx, 'process.not_killable', `process ${args.pid} is ${why}; only the tool user's processes take signals`, {
        pid: args.pid,
        user: entry.user,
        command: ctx.secrets.redaction.redactText(entry.command),
      });
    // The same process still (not ended and its pid reused by another user's) right before the signal.
    const now = await readProcess(args.pid);
    if (!now || now.uid !== entry.uid || now.sid !== entry.sid)
      return failed(startedAt, ctx, 'process.not_found', `process ${args.pid} ended before it was signalled`, { pid: args.pid });
    try {
      process.kill(args.pid, args.signal);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ESRCH')
        return failed(startedAt, ctx, 'process.not_found', `process ${args.pid} ended before it was signalled`, { pid: args.pid });
      return failed(startedAt, ctx, 'process.not_killable', `kill(${args.pid}, ${args.signal}): ${code ?? (err as Error).message}`, {
        pid: args.pid,
      });
    }
    const process_ = info(entry, ctx, byPid);
    const data = ctx.secrets.redaction.redactDeep({ pid: args.pid, signal: args.signal, delivered: true, process: process_ });
    return outcome(
      startedAt,
      {
        status: 'succeeded',
        error: null,
        commitState: 'committed',
        data,
        modelText: `sent ${args.signal} to ${args.pid} (${process_.command})`,
      },
      ctx,
    );
  },
};

/** The process tools, as the agent registers them. */
export const processTools: Array<AgentTool<unknown>> = [listProcessesTool, signalProcessTool] as Array<AgentTool<unknown>>;
