/**
 * The sandbox's processes: a listing and a signal, each a call of a process tool
 * (`list_processes`, `signal_process`; contract/tools/processes.ts) with its intent, events and
 * receipt like every call, reachable through the calls API too. A signal is also audited with
 * who sent it (`process.signal`), whatever its outcome.
 *
 * Why calls and not a cheaper agent query: a signal is an effect (intent first, a receipt, an
 * actor); a listing is a read, but going through the same path costs one queue round trip
 * (the tools declare no access, so the agent runs them at once, beside a running exec) and
 * gives the listing a receipt too — what ran at that moment — without a second channel.
 */
import { AppError } from '../../contract/errors.js';
import type { ToolResult } from '../../contract/objects.js';
import type { SignalName } from '../../contract/tools/processes.js';
import { ProcessInfo } from '../../contract/tools/processes.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { CallLease, CallService } from '../calls/service.js';
import type { Principal } from '../http/auth.js';
import type { ProcessList, SignalSent, StillRunning } from './schema.js';

/** How long a route holds the request for the agent's answer, ms; past it the call is returned to follow. */
const ANSWER_WAIT_MS = 30_000;

export interface ProcessServiceDeps {
  calls: Pick<CallService, 'submit' | 'waitFinished'>;
  audit: Pick<AuditLog, 'record'>;
}

export class ProcessService {
  constructor(private readonly deps: ProcessServiceDeps) {}

  /**
   * The sandbox's processes, or the call still running after the wait. Throws
   * `policy.tool_denied` (exec disabled), `queue.unavailable`, and what the call failed with.
   */
  async list(lease: CallLease): Promise<ProcessList | StillRunning> {
    const result = await this.run(lease, 'list_processes', {});
    if ('status' in result && !('receipt' in result)) return result;
    const data = succeeded(result as ToolResult);
    return {
      processes: ProcessInfo.array().parse((data as { processes: unknown }).processes),
      callId: (result as ToolResult).callId,
      receiptId: (result as ToolResult).receipt?.receiptId ?? null,
    };
  }

  /**
   * Sends `signal` to `pid`, audited as `by`'s. Throws `process.not_found` (404),
   * `process.not_killable` (403: init, the agent, its worker, not the tool user's),
   * `policy.tool_denied`, `queue.unavailable`; each with `details.callId`.
   */
  async signal(lease: CallLease, pid: number, signal: SignalName, by: Principal): Promise<SignalSent | StillRunning> {
    const result = await this.run(lease, 'signal_process', { pid, signal });
    const finished = 'receipt' in result ? (result as ToolResult) : null;
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'process.signal',
      target: `process:${lease.id}.${pid}`,
      beforeDigest: null,
      afterDigest: null,
      details: {
        signal,
        callId: result.callId,
        status: result.status,
        code: finished?.error?.code ?? null,
        receiptId: finished?.receipt?.receiptId ?? null,
      },
    });
    if (!finished) return result as StillRunning;
    const data = succeeded(finished) as { process?: unknown };
    return {
      pid,
      signal,
      process: ProcessInfo.nullable()
        .catch(null)
        .parse(data.process ?? null),
      callId: finished.callId,
      receiptId: finished.receipt?.receiptId ?? null,
    };
  }

  /** Submits the call and waits for its result; the call as it is when the wait ran out. */
  private async run(lease: CallLease, tool: string, args: Record<string, unknown>): Promise<ToolResult | StillRunning> {
    const { call } = await this.deps.calls.submit(lease, { tool, args });
    const view = await this.deps.calls.waitFinished(lease.id, call.callId, ANSWER_WAIT_MS);
    if (view.status === 'finished' && view.result) return view.result;
    return { callId: view.callId, status: view.status };
  }
}

/** The result's data when it succeeded; else its error as an AppError with the call's id and receipt. */
function succeeded(result: ToolResult): Record<string, unknown> {
  if (result.status === 'succeeded' && result.data) return result.data;
  const error = result.error;
  if (!error) throw new AppError('execution.effect_unknown', `${result.callId} ended ${result.status} without an error`);
  throw new AppError(error.code, error.message, {
    details: { ...error.details, callId: result.callId, receiptId: result.receipt?.receiptId ?? null },
  });
}
