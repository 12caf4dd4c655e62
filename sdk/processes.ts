/**
 * `sandbox.processes`: the sandbox's process table and signals to the tool user's processes.
 *
 *   const { processes } = await sbx.processes.list();
 *   const stuck = processes.find((p) => p.command.includes('npm run dev'));
 *   if (stuck?.killable) await sbx.processes.signal(stuck.pid, 'SIGINT');
 */
import { z } from 'zod';
import type { ToolResult } from '../contract/objects.js';
import { ProcessInfo, type SignalName } from '../contract/tools/processes.js';
import type { SbxClient } from './client.js';
import { SbxError } from './errors.js';

export { ProcessInfo };
export type { SignalName };

/** The process table and the `list_processes` call that read it (its receipt). */
export const ProcessList = z.object({ processes: z.array(ProcessInfo), callId: z.string(), receiptId: z.string().nullable() }).loose();
export type ProcessList = z.infer<typeof ProcessList>;

/** A signal sent: the process as it was, and the `signal_process` call (its receipt). */
export const SignalSent = z
  .object({
    pid: z.number().int(),
    signal: z.string(),
    process: ProcessInfo.nullable(),
    callId: z.string(),
    receiptId: z.string().nullable(),
  })
  .loose();
export type SignalSent = z.infer<typeof SignalSent>;

const Pending = z.object({ callId: z.string(), status: z.string() });

export class SandboxProcesses {
  constructor(private readonly sandbox: { readonly id: string; readonly client: SbxClient }) {}

  /**
   * Every process of the sandbox: pid, ppid, user, command, owner (`{kind: call|session|terminal, id}`
   * or null), CPU time (ms), RSS (bytes), `killable`. Throws SbxError `policy.tool_denied` (exec disabled).
   */
  async list(): Promise<ProcessList> {
    const body = await this.sandbox.client.listProcesses(this.sandbox.id);
    const parsed = ProcessList.safeParse(body);
    if (parsed.success) return parsed.data;
    const result = await this.follow(Pending.parse(body).callId);
    return ProcessList.parse({ ...(result.data ?? {}), callId: result.callId, receiptId: result.receipt?.receiptId ?? null });
  }

  /**
   * Sends `signal` (default SIGTERM) to `pid`. Throws SbxError `process.not_killable` (init,
   * the agent, its worker: not the tool user's), `process.not_found`, `input.invalid` (signal name).
   */
  async signal(pid: number, signal?: SignalName): Promise<SignalSent> {
    const body = await this.sandbox.client.signalProcess(this.sandbox.id, pid, signal);
    const parsed = SignalSent.safeParse(body);
    if (parsed.success) return parsed.data;
    const result = await this.follow(Pending.parse(body).callId);
    const data = (result.data ?? {}) as { process?: unknown };
    return SignalSent.parse({
      pid,
      signal: signal ?? 'SIGTERM',
      process: data.process ?? null,
      callId: result.callId,
      receiptId: result.receipt?.receiptId ?? null,
    });
  }

  /** Waits for a call the route left running, and its result; a failure as SbxError. */
  private async follow(callId: string): Promise<ToolResult> {
    const { client, id } = this.sandbox;
    for await (const event of client.events(id, callId)) void event;
    const result = (await client.getCall(id, callId)).result;
    if (!result || result.status !== 'succeeded') {
      const info = result?.error ?? {
        code: 'internal.unexpected' as const,
        domain: 'internal',
        retryability: 'safe' as const,
        message: `call ${callId} ended without a result`,
      };
      throw new SbxError(info, { result: result ?? null });
    }
    return result;
  }
}
