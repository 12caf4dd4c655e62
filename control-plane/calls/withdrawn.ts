/**
 * Secrets withdrawn from a running lease (a phase move, a live policy change: issue 16 parts 3
 * and 4): a call accepted under the old policy but not started yet would still be given them by
 * its agent, which holds every granted value. Such calls end `denied` (`policy.secret_denied`,
 * `withdrawn: true`) unless an attempt began (the take-back and the attempt's start exclude each
 * other: agent-link/calls-out.ts); a call already started keeps what it had, as a running one
 * does. A call waiting for approval is resolved again under the new policy when approved.
 */
import { errorInfo, type ErrorInfo } from '../../contract/errors.js';
import type { CallView } from '../../contract/objects.js';

/** What this needs of the call service (service.ts, which calls this: a port, not an import back). */
export interface WithdrawnSecretCalls {
  openCalls(leaseId: string): Promise<string[]>;
  get(leaseId: string, callId: string): Promise<CallView>;
  denyUnstarted(leaseId: string, callId: string, error: ErrorInfo): Promise<boolean>;
}

/**
 * Ends denied each of the lease's queued calls whose `args.secrets` names a secret not in
 * `allowed`, unless an agent took it first. Returns the ids it ended.
 */
export async function denyWithdrawnSecrets(calls: WithdrawnSecretCalls, leaseId: string, allowed: readonly string[]): Promise<string[]> {
  const denied: string[] = [];
  for (const callId of await calls.openCalls(leaseId)) {
    const call = await calls.get(leaseId, callId);
    const names = Array.isArray(call.args.secrets) ? (call.args.secrets as unknown[]).filter((n) => typeof n === 'string') : [];
    const withdrawn = names.find((name) => !allowed.includes(name));
    if (call.status !== 'queued' || withdrawn === undefined) continue;
    const error = errorInfo('policy.secret_denied', `secret ${withdrawn} was withdrawn before the call started: nothing ran`, {
      tool: call.tool,
      field: 'args.secrets',
      name: withdrawn,
      withdrawn: true,
    });
    if (await calls.denyUnstarted(leaseId, callId, error)) denied.push(callId);
  }
  return denied;
}
