/**
 * What the agent is sent for a call (contract/queue.ts `CallJob`): the call resolved under the
 * lease's policy, bound to the lease's manifest; and the ids of calls a client did not name.
 */
import { randomUUID } from 'node:crypto';
import type { CallJob } from '../../contract/queue.js';
import type { ResolvedExecution, ToolDefinition } from './tools.js';

/** A call id for a submission that named none: `call_` and 32 hex digits. */
export function newCallId(): string {
  return `call_${randomUUID().replaceAll('-', '')}`;
}

/** The job the agent runs for call `callId` of `tool`, resolved under the lease's policy, in the lease's manifest (`manifestDigest`). */
export function jobOf(
  manifestDigest: string,
  tool: ToolDefinition,
  callId: string,
  fingerprint: string,
  resolved: ResolvedExecution,
): CallJob {
  const { args, timeoutMs, maxOutputBytes, accesses } = resolved;
  return {
    callId,
    tool: tool.name,
    toolVersion: tool.version,
    args,
    fingerprint,
    manifestDigest,
    timeoutMs,
    maxOutputBytes,
    accesses,
  };
}
