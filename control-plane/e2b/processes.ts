/**
 * envd's `process.Process` service over sbx calls (issue 17 part 1): each command an E2B client
 * starts is an `exec` call — with its events, result and receipt in sbx's own API — and its
 * process id (the `call.started` pid) names it to the RPCs that follow. A stream is a tail of the
 * call's events: `start{pid}` once the process runs, `data` per output chunk, `end` with the exit,
 * then the end-stream message; a client that goes away stops the tail, never the command.
 */
import type { ServerResponse } from 'node:http';
import type { CallEvent } from '../../contract/events.js';
import type { ToolResult } from '../../contract/objects.js';
import type { CallService } from '../calls/service.js';
import type { CallStore } from '../calls/store.js';
import type { LeaseRecord } from '../leases/store.js';
import type { Notifier } from '../redis/notifier.js';
import type { StdinBody } from '../terminals/schema.js';
import type { TerminalService } from '../terminals/service.js';
import { ConnectError, endStream, envelope, toConnectError } from './connect.js';
import type { StartRequest } from './schema.js';
import type { E2bProcess, E2bProcessStore } from './store.js';

/** How often an idle stream gets a keepalive event, ms (the SDK asks for 50 s; proxies close sooner). */
const KEEPALIVE_MS = 15_000;

export interface E2bProcessesDeps {
  calls: Pick<CallService, 'submit' | 'get' | 'cancel'>;
  events: Pick<CallStore, 'readEvents' | 'notifyChannel'>;
  notifier: Pick<Notifier, 'next'>;
  /** A command's stdin (`stdin`), and PTYs, which are sbx terminals: started, written and resized through their service. */
  terminals: Pick<TerminalService, 'stdin' | 'create' | 'writeBytes' | 'resize'>;
  store: E2bProcessStore;
}

/** The login shell E2B clients start a PTY with (`pty.create`): sbx's terminal default, the tool user's login shell. */
const isLoginShell = (cmd: string, args: readonly string[]): boolean =>
  /^\/(usr\/)?bin\/(ba)?sh$/.test(cmd) && args.every((a) => a === '-i' || a === '-l');

/** `argv` as one POSIX shell script (each word single-quoted). */
const shellScript = (argv: readonly string[]): string => argv.map((a) => `'${a.replaceAll("'", `'\\''`)}'`).join(' ');

/** process.proto `ProcessEvent.EndEvent` of a finished call, or the stream's error (a timeout, a refusal before it ran). */
function endOf(result: ToolResult): { end: Record<string, unknown> } | ConnectError {
  if (result.status === 'timed_out') return new ConnectError('deadline_exceeded', result.error?.message ?? 'the command timed out');
  if (result.exitCode === null && result.signal === null) return toConnectErrorOfResult(result);
  const signal = result.signal?.replace(/^SIG/, '').toLowerCase();
  const status = signal
    ? `signal: ${signal === 'kill' ? 'killed' : signal === 'term' ? 'terminated' : signal}`
    : `exit status ${result.exitCode}`;
  const failed = result.exitCode !== 0;
  return { end: { exitCode: result.exitCode ?? -1, exited: signal === undefined, status, ...(failed ? { error: status } : {}) } };
}

/** The Connect error of a call that ended without a process: denied, failed before start, cancelled before it ran. */
function toConnectErrorOfResult(result: ToolResult): ConnectError {
  const code = result.error?.code ?? result.status;
  const message = `${code}: ${result.error?.message ?? result.status}`;
  if (result.status === 'denied') return new ConnectError('permission_denied', message);
  if (result.status === 'cancelled') return new ConnectError('canceled', message);
  if (code.startsWith('input.') || code.startsWith('files.')) return new ConnectError('invalid_argument', message);
  return new ConnectError('unavailable', message);
}

export class E2bProcesses {
  constructor(private readonly deps: E2bProcessesDeps) {}

  /**
   * `Process/Start`: submits `request` as an exec call and streams it to `res` (headers already
   * written) until it ends or `closed` aborts. `timeoutMs`: the client's `Connect-Timeout-Ms`
   * (null: the policy's limit). With `pty`, an sbx terminal (no timeout: it lives until it exits
   * or is killed, within the policy's terminal limits).
   */
  async start(
    lease: LeaseRecord,
    request: StartRequest,
    timeoutMs: number | null,
    res: ServerResponse,
    closed: AbortSignal,
  ): Promise<void> {
    const { cmd, args, envs, cwd } = request.process;
    if (request.pty) {
      const terminal = await this.deps.terminals.create(lease, {
        ...(isLoginShell(cmd, args) ? {} : { cmd: shellScript([cmd, ...args]) }),
        cols: request.pty.size.cols,
        rows: request.pty.size.rows,
        ...(cwd ? { cwd } : {}),
        env: envs,
      });
      const process: E2bProcess = { callId: terminal.terminalId, config: { cmd, args, envs, ...(cwd ? { cwd } : {}) }, pty: true };
      await this.deps.store.remember(lease.id, process);
      await this.stream(lease, process, 0, res, closed, true);
      return;
    }
    // E2B's deadline (none: `timeoutMs: 0`) within the policy's largest; never refused for being long.
    const maxTimeoutMs = lease.policySnapshot.tools.exec.maxTimeoutMs;
    const { call } = await this.deps.calls.submit(lease, {
      tool: 'exec',
      args: {
        argv: [cmd, ...args],
        env: envs,
        ...(cwd ? { cwd } : {}),
        ...(request.stdin ? { stdin: 'pipe' } : {}),
        timeoutMs: Math.min(timeoutMs ?? maxTimeoutMs, maxTimeoutMs),
        // E2B commands run side by side (a server in the background, then a client of it): as
        // sbx background tasks, which hold no place in the sandbox's scheduler once started.
        background: true,
      },
    });
    const process: E2bProcess = {
      callId: call.callId,
      config: { cmd, args, envs, ...(cwd ? { cwd } : {}) },
      ...(request.tag ? { tag: request.tag } : {}),
    };
    await this.deps.store.remember(lease.id, process);
    await this.stream(lease, process, 0, res, closed, true);
  }

  /** `Process/Connect`: the output of running process `pid` from now on, after its `start`. Throws `not_found` (also once it ended). */
  async connect(lease: LeaseRecord, pid: number, res: ServerResponse, closed: AbortSignal): Promise<void> {
    const process = await this.processOf(lease, pid);
    const events = await this.deps.events.readEvents(lease.id, process.callId);
    if (events.some((e) => e.type === 'call.finished')) throw new ConnectError('not_found', `process ${pid} has ended`);
    res.write(envelope({ event: { start: { pid } } }));
    await this.stream(lease, process, events.at(-1)?.seq ?? 0, res, closed, false);
  }

  /** `Process/List`: the processes started through envd that still run (also those whose client left before they started). */
  async list(lease: LeaseRecord): Promise<Array<{ pid: number; config: E2bProcess['config']; tag?: string }>> {
    const { processes, pids } = await this.deps.store.all(lease.id);
    const out = [];
    for (const p of processes) {
      const call = await this.deps.calls.get(lease.id, p.callId).catch(() => null);
      if (!call || call.status === 'finished') continue;
      const pid = pids.get(p.callId) ?? (await this.pidOfCall(lease, p.callId));
      if (pid !== null) out.push({ pid, config: p.config, ...(p.tag ? { tag: p.tag } : {}) });
    }
    return out;
  }

  /** `Process/SendSignal`: SIGTERM or SIGKILL ends the command as a cancel (TERM, grace, KILL; the call's receipt says so). `not_found` once it ended. */
  async signal(lease: LeaseRecord, pid: number): Promise<void> {
    const process = await this.processOf(lease, pid);
    const { changed } = await this.deps.calls.cancel(lease, process.callId);
    if (!changed) throw new ConnectError('not_found', `process ${pid} has ended`);
  }

  /** `Process/SendInput` (stdin, or a PTY's input) and `Process/CloseStdin` (`eof`). */
  async input(lease: LeaseRecord, pid: number, body: StdinBody): Promise<void> {
    const process = await this.processOf(lease, pid);
    if (!process.pty) return this.deps.terminals.stdin(lease.id, process.callId, body);
    if (body.eof) throw new ConnectError('failed_precondition', `process ${pid} is a PTY: it has no stdin to close`);
    await this.deps.terminals.writeBytes(lease.id, process.callId, Buffer.from(body.dataBase64 ?? '', 'base64'));
  }

  /** `Process/Update`: a PTY's new size. Throws `failed_precondition` for a process without one. */
  async resize(lease: LeaseRecord, pid: number, size: { cols: number; rows: number }): Promise<void> {
    const process = await this.processOf(lease, pid);
    if (!process.pty) throw new ConnectError('failed_precondition', `process ${pid} has no PTY`);
    await this.deps.terminals.resize(lease.id, process.callId, size);
  }

  /** The command of `pid`: by the pids seen, else by the `call.started` events of the commands whose pid is not known yet. */
  private async processOf(lease: LeaseRecord, pid: number): Promise<E2bProcess> {
    let callId = await this.deps.store.callOf(lease.id, pid);
    if (callId === null) {
      const { processes, pids } = await this.deps.store.all(lease.id);
      for (const p of processes.filter((q) => !pids.has(q.callId))) {
        if ((await this.pidOfCall(lease, p.callId)) === pid) callId = p.callId;
      }
    }
    const process = callId === null ? null : await this.deps.store.get(lease.id, callId);
    if (!process) throw new ConnectError('not_found', `no process ${pid} started through envd in sandbox ${lease.id}`);
    return process;
  }

  /** The pid of call `callId`'s process from its `call.started` event (recorded when found), or null before it started. */
  private async pidOfCall(lease: LeaseRecord, callId: string): Promise<number | null> {
    const started = (await this.deps.events.readEvents(lease.id, callId)).find((e) => e.type === 'call.started');
    const pid = started?.type === 'call.started' ? started.pid : null;
    if (pid !== null) await this.deps.store.rememberPid(lease.id, pid, callId);
    return pid;
  }

  /** Tails the call's events after `afterSeq` into `res` as process events, then ends the stream. */
  private async stream(
    lease: LeaseRecord,
    process: E2bProcess,
    afterSeq: number,
    res: ServerResponse,
    closed: AbortSignal,
    announce: boolean,
  ): Promise<void> {
    const channel = this.deps.events.notifyChannel(lease.id, process.callId);
    let seq = afterSeq;
    let failure: ConnectError | undefined;
    // A client takes nothing before `start` (the SDK fails on any other first message): keepalives wait for it.
    let started = !announce;
    try {
      for (;;) {
        if (closed.aborted) return;
        const wake = this.deps.notifier.next(channel, KEEPALIVE_MS, closed);
        const events = await this.deps.events.readEvents(lease.id, process.callId, seq);
        for (const event of events) {
          seq = event.seq;
          const message = await this.messageOf(lease, process, event, announce);
          if (message instanceof ConnectError) {
            failure = message;
            return;
          }
          if (message !== null) res.write(envelope(message));
          if (event.type === 'call.started') started = true;
          if (event.type === 'call.finished') return;
        }
        if (events.length === 0 && started) res.write(envelope({ event: { keepalive: {} } }));
        await wake;
      }
    } catch (err) {
      failure = toConnectError(err);
    } finally {
      if (!closed.aborted) res.end(endStream(failure));
    }
  }

  /** The process event of one call event (null: none), or the error that ends the stream. */
  private async messageOf(lease: LeaseRecord, process: E2bProcess, event: CallEvent, announce: boolean): Promise<unknown> {
    if (event.type === 'call.started' && announce) {
      if (event.pid === null) return new ConnectError('internal', 'the command started without a process id');
      await this.deps.store.rememberPid(lease.id, event.pid, process.callId);
      return { event: { start: { pid: event.pid } } };
    }
    if (event.type === 'output')
      return { event: { data: { [process.pty ? 'pty' : event.stream === 'stderr' ? 'stderr' : 'stdout']: event.dataBase64 } } };
    // The policy's output limit cut the live stream: said on stderr, never a silent cut.
    if (event.type === 'output.truncated') {
      const note = `\n[sbx: ${event.stream} cut after ${event.keptBytes} bytes by the policy's output limit; its whole bytes are an artifact of call ${process.callId}]\n`;
      return { event: { data: { [process.pty ? 'pty' : 'stderr']: Buffer.from(note).toString('base64') } } };
    }
    if (event.type === 'call.finished') {
      const call = await this.deps.calls.get(lease.id, process.callId);
      if (!call.result) return new ConnectError('internal', 'the command finished without a result');
      const end = endOf(call.result);
      return end instanceof ConnectError ? end : { event: end };
    }
    return null;
  }
}
