/**
 * Terminals, and stdin to a running call. A terminal is a call of the `terminal` tool
 * (contract/tools/terminal.ts) under the hood: its id is the callId, so its output events (gap-free
 * `seq`, resume), its receipt and its transcript artifact come from the calls machinery and are
 * reachable through the calls API too. Input, resizes and EOF go to the agent in order on the
 * call's input stream (agent-link/input-out.ts), the same channel as an exec's piped stdin.
 */
import { randomUUID } from 'node:crypto';
import { AppError } from '../../contract/errors.js';
import type { CallView } from '../../contract/objects.js';
import type { InputMessage } from '../../contract/queue.js';
import type { InputOut } from '../agent-link/input-out.js';
import type { CallLease, CallService } from '../calls/service.js';
import { TERMINAL_TOOL } from '../calls/tools.js';
import type { CreateTerminalBody, StdinBody, TerminalInputBody, TerminalSize, TerminalView } from './schema.js';
import type { TerminalSlots } from './store.js';

/** How long a create waits for the terminal's program to start, ms. */
const START_WAIT_MS = 30_000;

export interface TerminalServiceDeps {
  calls: Pick<CallService, 'submit' | 'get' | 'waitFinished' | 'cancel'>;
  input: Pick<InputOut, 'send' | 'markStdinClosed' | 'stdinClosed'>;
  /** The places counted against `terminals.max` (taken atomically before a terminal is submitted). */
  slots: Pick<TerminalSlots, 'reserve' | 'release' | 'live'>;
  now: () => Date;
}

/** The terminal's view of its call. */
export function terminalView(call: CallView): TerminalView {
  const pid = typeof call.detached?.data?.pid === 'number' ? call.detached.data.pid : null;
  const status = call.status === 'finished' ? 'exited' : call.status === 'detached' ? 'running' : 'starting';
  return {
    terminalId: call.callId,
    status,
    pid,
    exitCode: call.result?.exitCode ?? null,
    signal: call.result?.signal ?? null,
    result: call.result,
  };
}

export class TerminalService {
  constructor(private readonly deps: TerminalServiceDeps) {}

  /**
   * Starts a terminal and waits (up to 30 s) until its program runs. Throws
   * `terminal.limit_reached` (429) when the policy's `terminals.max` are open,
   * `policy.tool_denied` (exec disabled), `input.cwd_not_found`, `execution.spawn_failed`.
   */
  async create(lease: CallLease, body: CreateTerminalBody): Promise<TerminalView> {
    const { calls, slots } = this.deps;
    const max = lease.policySnapshot.terminals.max;
    await this.prune(lease.id);
    // The place is taken before the call exists: creates at once cannot all count the same room.
    const terminalId = `call_${randomUUID().replaceAll('-', '')}`;
    if (!(await slots.reserve(lease.id, terminalId, max, this.deps.now().getTime()))) {
      const open = (await slots.live(lease.id)).length;
      throw new AppError('terminal.limit_reached', `this sandbox has ${open} terminals open; the policy allows ${max}`, {
        details: { open, max },
      });
    }
    try {
      await calls.submit(lease, { tool: TERMINAL_TOOL.name, callId: terminalId, args: { ...body, env: body.env ?? {} } }, TERMINAL_TOOL);
    } catch (err) {
      await slots.release(lease.id, terminalId);
      throw err;
    }
    const started = await calls.waitFinished(lease.id, terminalId, START_WAIT_MS);
    const result = started.result;
    if (started.status === 'finished') await slots.release(lease.id, terminalId);
    // Nothing ran (a missing cwd, a spawn failure): the create fails with the reason.
    if (result?.error && result.receipt?.commitState === 'not_started') {
      throw new AppError(result.error.code, result.error.message, { details: { ...result.error.details, terminalId } });
    }
    return terminalView(started);
  }

  /** Throws `terminal.not_found` for a missing id or a call that is not a terminal. */
  async get(leaseId: string, terminalId: string): Promise<TerminalView> {
    return terminalView(await this.call(leaseId, terminalId));
  }

  /** Sends bytes to the terminal. Throws `terminal.not_found`, `terminal.closed` (409). */
  async write(leaseId: string, terminalId: string, body: TerminalInputBody): Promise<void> {
    await this.open(leaseId, terminalId);
    await this.deps.input.send(leaseId, terminalId, [{ kind: 'data', dataBase64: base64Of(body) }]);
  }

  /** Sends raw bytes (a WebSocket frame) to the terminal; same errors as `write`, checked by the caller once. */
  async writeBytes(leaseId: string, terminalId: string, data: Buffer): Promise<void> {
    await this.deps.input.send(leaseId, terminalId, [{ kind: 'data', dataBase64: data.toString('base64') }]);
  }

  /** Resizes the terminal's window (the program gets SIGWINCH). Throws `terminal.not_found`, `terminal.closed`. */
  async resize(leaseId: string, terminalId: string, size: TerminalSize, checked = false): Promise<void> {
    if (!checked) await this.open(leaseId, terminalId);
    await this.deps.input.send(leaseId, terminalId, [{ kind: 'resize', cols: size.cols, rows: size.rows }]);
  }

  /**
   * Closes the terminal: its session is hung up (SIGHUP) and killed (SIGKILL after a grace);
   * the call ends `cancelled` with its receipt and transcript. A terminal that ended is
   * returned as it is. Throws `terminal.not_found`.
   */
  async close<L extends CallLease>(lease: L, terminalId: string, assertUsable: (lease: L) => void): Promise<TerminalView> {
    await this.call(lease.id, terminalId);
    const { call } = await this.deps.calls.cancel(lease, terminalId, assertUsable);
    return terminalView(call);
  }

  /**
   * Writes to the stdin of a call started with `stdin: "pipe"`, in order; `eof` closes it
   * after the bytes. Throws `call.not_found`, `call.finished` (409), `call.stdin_not_piped`
   * (409: not piped, or closed already).
   */
  async stdin(leaseId: string, callId: string, body: StdinBody): Promise<void> {
    const call = await this.deps.calls.get(leaseId, callId);
    if (call.status === 'finished') {
      throw new AppError('call.finished', `call ${callId} has finished; it takes no stdin`, {
        details: { callId, status: call.result?.status },
      });
    }
    if (call.tool !== 'exec' || call.args.stdin !== 'pipe') {
      throw new AppError('call.stdin_not_piped', `call ${callId} was not started with stdin: "pipe"`, { details: { callId } });
    }
    if (await this.deps.input.stdinClosed(leaseId, callId)) {
      throw new AppError('call.stdin_not_piped', `the stdin of call ${callId} was closed (eof)`, { details: { callId } });
    }
    const messages: InputMessage[] = [];
    if (body.data !== undefined || body.dataBase64 !== undefined) messages.push({ kind: 'data', dataBase64: base64Of(body) });
    if (body.eof) {
      // Two concurrent closes: one wins, the other is refused like a write after the close.
      if (!(await this.deps.input.markStdinClosed(leaseId, callId))) {
        throw new AppError('call.stdin_not_piped', `the stdin of call ${callId} was closed (eof)`, { details: { callId } });
      }
      messages.push({ kind: 'eof' });
    }
    await this.deps.input.send(leaseId, callId, messages);
  }

  /** The terminal's call, open for input. Throws `terminal.not_found`, `terminal.closed`. */
  async open(leaseId: string, terminalId: string): Promise<CallView> {
    const call = await this.call(leaseId, terminalId);
    if (call.status === 'finished') {
      throw new AppError('terminal.closed', `terminal ${terminalId} has ended`, {
        details: { terminalId, status: call.result?.status, exitCode: call.result?.exitCode ?? null, signal: call.result?.signal ?? null },
      });
    }
    return call;
  }

  private async call(leaseId: string, terminalId: string): Promise<CallView> {
    let call: CallView;
    try {
      call = await this.deps.calls.get(leaseId, terminalId);
    } catch (err) {
      if (err instanceof AppError && err.code === 'call.not_found') call = null as never;
      else throw err;
    }
    if (!call || call.tool !== TERMINAL_TOOL.name) {
      throw new AppError('terminal.not_found', `no terminal ${terminalId} in sandbox ${leaseId}`, { details: { terminalId } });
    }
    return call;
  }

  /**
   * Stops counting the terminals whose call has finished (exit, close, timeout, lease end), and
   * places whose call never came (the create died between the reservation and the submit). A
   * place younger than the start wait is kept: its create may be submitting right now.
   */
  private async prune(leaseId: string): Promise<void> {
    const nowMs = this.deps.now().getTime();
    for (const { terminalId, reservedAtMs } of await this.deps.slots.live(leaseId)) {
      const call = await this.deps.calls.get(leaseId, terminalId).catch(() => null);
      if (call ? call.status === 'finished' : nowMs - reservedAtMs > START_WAIT_MS) await this.deps.slots.release(leaseId, terminalId);
    }
  }
}

function base64Of(body: { data?: string; dataBase64?: string }): string {
  return body.dataBase64 ?? Buffer.from(body.data ?? '', 'utf8').toString('base64');
}
