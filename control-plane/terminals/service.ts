/**
 * Terminals, and stdin to a running call. A terminal is a call of the `terminal` tool
 * (contract/tools/terminal.ts) under the hood: its id is the callId, so its output events (gap-free
 * `seq`, resume), its receipt and its transcript artifact come from the calls machinery and are
 * reachable through the calls API too. Input, resizes and EOF go to the agent in order on the
 * call's input stream (agent-link/input-out.ts), the same channel as an exec's piped stdin.
 */
import { newCallId } from '../calls/job.js';
import { AppError } from '../../contract/errors.js';
import type { CallView } from '../../contract/objects.js';
import type { InputOut } from '../agent-link/input-out.js';
import { terminalSpec } from '../../contract/tools/terminal.js';
import { detachedStateOf, START_WAIT_MS, waitUntilRunning } from '../calls/detached-calls.js';
import type { CallLease, CallService } from '../calls/service.js';
import type { Principal } from '../http/auth.js';
import { SIGNED_URL_PRINCIPAL, signGrant, verifyGrant } from '../http/signed-urls.js';
import type { LeaseRecord } from '../leases/store.js';
import {
  MAX_PENDING_STDIN_BYTES,
  type CreateTerminalBody,
  type StdinBody,
  type TerminalInputBody,
  type TerminalSize,
  type TerminalUrl,
  type TerminalView,
} from './schema.js';
import type { TerminalSlots } from './store.js';

export interface TerminalServiceDeps {
  calls: Pick<CallService, 'submit' | 'get' | 'openCalls' | 'waitFinished' | 'cancel'>;
  input: Pick<InputOut, 'send' | 'sendStdin'>;
  /** The places of `terminals.max` (store.ts). */
  slots: Pick<TerminalSlots, 'reserve' | 'release' | 'live'>;
  /** Leases for signed attach URLs: found without a key (the signature bound the URL to one sandbox), and usable now. */
  leases: { visible(id: string, by: Principal): Promise<LeaseRecord>; usable(lease: LeaseRecord): LeaseRecord };
  /** HMAC key of signed URLs (http/signed-urls.ts). */
  urlKey: Buffer;
  now: () => Date;
}

/** The terminal's view of its call. */
export function terminalView(call: CallView): TerminalView {
  const { state, pid } = detachedStateOf(call);
  return {
    terminalId: call.callId,
    status: state === 'ended' ? 'exited' : state,
    pid,
    exitCode: call.result?.exitCode ?? null,
    signal: call.result?.signal ?? null,
    result: call.result,
  };
}

export class TerminalService {
  constructor(private readonly deps: TerminalServiceDeps) {}

  /**
   * Starts a terminal and waits (up to 30 s) until its program runs. A place of the policy's
   * `terminals.max` is taken first, atomically (store.ts), and held until the terminal ends;
   * a start that fails gives it back. Throws `terminal.limit_reached` (429) when every place is
   * taken, `policy.tool_denied` (exec disabled), `input.cwd_not_found`, `execution.spawn_failed`.
   */
  async create(lease: CallLease, body: CreateTerminalBody): Promise<TerminalView> {
    const { calls, slots } = this.deps;
    const max = lease.policySnapshot.terminals.max;
    await this.prune(lease.id);
    const terminalId = newCallId();
    if (!(await slots.reserve(lease.id, terminalId, max, this.deps.now().getTime()))) {
      const open = (await slots.live(lease.id)).length;
      throw new AppError('terminal.limit_reached', `this sandbox has ${open} terminals open; the policy allows ${max}`, {
        details: { open, max },
      });
    }
    try {
      await calls.submit(lease, { tool: terminalSpec.name, callId: terminalId, args: { ...body, env: body.env ?? {} } });
    } catch (err) {
      await slots.release(lease.id, terminalId);
      throw err;
    }
    const started = await waitUntilRunning(calls, lease.id, terminalId);
    // Ended already (it ran and exited, or never ran): its place is free again.
    if (started.status === 'finished') await slots.release(lease.id, terminalId);
    const result = started.result;
    // Nothing ran (a missing cwd, a spawn failure): the create fails with the reason.
    if (result?.error && result.receipt?.commitState === 'not_started') {
      throw new AppError(result.error.code, result.error.message, { details: { ...result.error.details, terminalId } });
    }
    return terminalView(started);
  }

  /**
   * A signed URL that attaches a browser to terminal `terminalId` over WebSocket without an API
   * key, valid `expiresInSeconds` (never past the sandbox's `expiresAt`), for this terminal
   * only. Throws `terminal.not_found`, `terminal.closed`.
   */
  async mintUrl(
    lease: Pick<LeaseRecord, 'id' | 'expiresAt'>,
    terminalId: string,
    by: Principal,
    expiresInSeconds: number,
    base: { protocol: string; host: string },
  ): Promise<TerminalUrl> {
    await this.open(lease.id, terminalId);
    const nowMs = this.deps.now().getTime();
    const expiresAt = new Date(Math.min(nowMs + expiresInSeconds * 1000, Date.parse(lease.expiresAt)));
    const token = signGrant(this.deps.urlKey, 'terminal', { sandboxId: lease.id, subject: terminalId, expiresAt, keyId: by.keyId });
    const path = `/v1/terminal-ws/${lease.id}/${terminalId}/${token}`;
    const scheme = base.protocol === 'https' ? 'wss' : 'ws';
    return { url: `${scheme}://${base.host}${path}`, path, expiresAt: expiresAt.toISOString(), terminalId };
  }

  /**
   * The lease a signed attach URL opens, with the terminal open for input. Throws
   * `terminal.url_invalid`, `terminal.url_expired` (401: also a token of another terminal or
   * sandbox), `lease.not_found`, the `usable` refusals, `terminal.not_found`, `terminal.closed`.
   */
  async grantOf(sandboxId: string, terminalId: string, token: string): Promise<{ lease: LeaseRecord; keyId: string }> {
    const grant = verifyGrant(this.deps.urlKey, 'terminal', sandboxId, terminalId, token, this.deps.now());
    const lease = this.deps.leases.usable(await this.deps.leases.visible(sandboxId, SIGNED_URL_PRINCIPAL));
    await this.open(sandboxId, terminalId);
    return { lease, keyId: grant.keyId };
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
   * after the bytes. All or nothing: at most `MAX_PENDING_STDIN_BYTES` may wait for the process
   * to read them; a write that would go over is refused whole (nothing is ever dropped). Throws
   * `call.not_found`, `call.finished` (409), `call.stdin_not_piped` (409: not piped, or closed
   * already), `call.stdin_full` (429: the process has not read enough yet; retry later).
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
    const data = body.data !== undefined || body.dataBase64 !== undefined ? Buffer.from(base64Of(body), 'base64') : null;
    // Two concurrent closes: one wins, the other is refused like a write after the close.
    const sent = await this.deps.input.sendStdin(leaseId, callId, data, body.eof, MAX_PENDING_STDIN_BYTES);
    if (sent.outcome === 'closed')
      throw new AppError('call.stdin_not_piped', `the stdin of call ${callId} was closed (eof)`, { details: { callId } });
    if (sent.outcome === 'full')
      throw new AppError(
        'call.stdin_full',
        `call ${callId} has ${sent.pendingBytes} bytes of stdin it has not read yet; ${data?.length ?? 0} more would pass the limit of ${MAX_PENDING_STDIN_BYTES}`,
        { details: { callId, pendingBytes: sent.pendingBytes, sizeBytes: data?.length ?? 0, limitBytes: MAX_PENDING_STDIN_BYTES } },
      );
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
    if (!call || call.tool !== terminalSpec.name) {
      throw new AppError('terminal.not_found', `no terminal ${terminalId} in sandbox ${leaseId}`, { details: { terminalId } });
    }
    return call;
  }

  /** The sandbox's open terminals (starting or running), oldest first; an ended one is read by its id. */
  async list(leaseId: string): Promise<TerminalView[]> {
    const ids = await this.deps.calls.openCalls(leaseId);
    const calls = await Promise.all(ids.map((id) => this.deps.calls.get(leaseId, id).catch(() => null)));
    return calls.filter((c): c is CallView => c?.tool === terminalSpec.name).map(terminalView);
  }

  /**
   * Gives back the places of terminals whose call has finished (exit, close, timeout, lease end),
   * and places whose call never came (the create died between the reservation and the submit). A
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
