/**
 * The end of a call whose lease is going away (CallService.abandonOpenCalls): what is known of
 * its effect, and the receipt the control plane writes itself for an attempt that started.
 */
import { errorInfo } from '../../contract/errors.js';
import type { CallView, ToolResult } from '../../contract/objects.js';
import { lostReceipt, resultWithoutRun } from '../../contract/receipts.js';
import { TOOLS } from './tools.js';

/**
 * `cancelled` (`not_started`) when no attempt started (`attemptId` null), `effect_unknown`
 * (`unknown`) when one did (docs/DESIGN.md invariant 2), with a receipt of that attempt bound
 * to `manifestDigest` (none without one: a lease record lost with its sandbox).
 */
export function abandonedResult(call: CallView, attemptId: string | null, manifestDigest: string | null, now: Date): ToolResult {
  const { callId, leaseId } = call;
  const result = attemptId
    ? resultWithoutRun(
        callId,
        'effect_unknown',
        errorInfo('execution.sandbox_lost', 'the sandbox went away while the call ran; its effects are unknown'),
      )
    : resultWithoutRun(callId, 'cancelled', errorInfo('execution.cancelled', 'the sandbox went away before the call started; nothing ran'));
  if (attemptId && manifestDigest) {
    const subject = {
      callId,
      attemptId,
      leaseId,
      tool: call.tool,
      toolVersion: TOOLS.get(call.tool)?.version ?? 'unknown',
      fingerprint: call.fingerprint,
      manifestDigest,
    };
    // The attempt started, so its process had the secrets its call asked for.
    result.receipt = lostReceipt(
      subject,
      new Date(call.createdAt),
      now,
      Array.isArray(call.args.secrets) ? call.args.secrets.map(String).sort() : [],
    );
  }
  return result;
}
