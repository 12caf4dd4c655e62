/**
 * Receipts and results built in one place: the agent (an attempt's receipt, from what it
 * observed) and the control plane (a call that never ran, or whose sandbox was lost) both use
 * these builders, so a receipt's shape and its "nothing observed" values are declared once.
 */
import type { ErrorInfo } from './errors.js';
import type { CommitState, EffectReceipt, ResultStatus, ToolResult } from './objects.js';

/** Which attempt of which call a receipt is about, bound to its lease and manifest. */
export interface ReceiptSubject {
  callId: string;
  attemptId: string;
  leaseId: string;
  tool: string;
  toolVersion: string;
  /** Digest of the resolved call. */
  fingerprint: string;
  manifestDigest: string;
}

/** What an attempt observed; a field left out was not observed (null, or empty). */
export type ReceiptFacts = Partial<
  Pick<EffectReceipt, 'exit' | 'environment' | 'runner' | 'outputs' | 'cleanup' | 'versions' | 'artifacts' | 'secretsUsed'>
>;

/** The receipt of an attempt of `subject` in `commitState` from `startedAt` to `endedAt`; `receiptId` defaults to one derived from the attempt. */
export function attemptReceipt(
  subject: ReceiptSubject,
  commitState: CommitState,
  startedAt: Date,
  endedAt: Date,
  facts: ReceiptFacts,
  receiptId?: string,
): EffectReceipt {
  return {
    receiptId: receiptId ?? `rcpt_${subject.callId}_${subject.attemptId.slice(4, 12)}`,
    callId: subject.callId,
    attemptId: subject.attemptId,
    leaseId: subject.leaseId,
    tool: subject.tool,
    toolVersion: subject.toolVersion,
    fingerprint: subject.fingerprint,
    commitState,
    startedAt: startedAt.toISOString(),
    endedAt: endedAt.toISOString(),
    durationMs: endedAt.getTime() - startedAt.getTime(),
    exit: facts.exit ?? null,
    environment: facts.environment ?? null,
    runner: facts.runner ?? null,
    outputs: facts.outputs ?? null,
    cleanup: facts.cleanup ?? null,
    versions: facts.versions ?? [],
    artifacts: facts.artifacts ?? [],
    secretsUsed: facts.secretsUsed ?? [],
    manifestDigest: subject.manifestDigest,
  };
}

/**
 * The receipt the control plane writes for an attempt whose sandbox went away while it ran:
 * commit state `unknown`, nothing observed but the secrets its process was given.
 */
export function lostReceipt(subject: ReceiptSubject, startedAt: Date, endedAt: Date, secretsUsed: string[]): EffectReceipt {
  return attemptReceipt(subject, 'unknown', startedAt, endedAt, { secretsUsed }, `rcpt_${subject.callId}_lost`);
}

/** A result with no output and no receipt (denied, cancelled before it started, lost); `modelText` defaults to the error's message. */
export function resultWithoutRun(
  callId: string,
  status: ResultStatus,
  error: ErrorInfo | null,
  extra: Partial<Pick<ToolResult, 'modelText' | 'data'>> = {},
): ToolResult {
  return {
    callId,
    status,
    error,
    modelText: extra.modelText ?? error?.message ?? status,
    exitCode: null,
    signal: null,
    stdout: '',
    stderr: '',
    truncation: null,
    data: extra.data ?? null,
    artifacts: [],
    receipt: null,
  };
}
