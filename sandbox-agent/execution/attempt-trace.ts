/**
 * The phases of one attempt as spans of its call's trace (contract/trace.ts `AgentSpan`), made
 * when the call came with a sampled `traceparent`: `schedule` from the job's arrival to its turn,
 * `attempt` from its turn to its result, and inside the attempt `process`, `output` and `receipt`.
 * Times are the wall clock in milliseconds (`Date.now()`, as the receipts' and the control
 * plane's), so the spans nest with the control plane's `execute_tool` span on one host's clock.
 */
import { randomBytes } from 'node:crypto';
import { parseTraceparent, type AgentSpan } from '../../contract/trace.js';

/** A span id of 8 random bytes, never all zero (W3C Trace Context). */
function newSpanId(): string {
  for (;;) {
    const id = randomBytes(8).toString('hex');
    if (id !== '0000000000000000') return id;
  }
}

export class AttemptTrace {
  private readonly receivedMs = Date.now();
  private scheduledMs: number | null = null;
  private readonly attemptSpanId = newSpanId();
  private readonly phases: AgentSpan[] = [];

  private constructor(private readonly callSpanId: string) {}

  /** The trace of a job with this `traceparent`; null when it has none, a malformed one, or an unsampled one (nothing is recorded). */
  static of(traceparent: string | undefined): AttemptTrace | null {
    const parent = traceparent === undefined ? null : parseTraceparent(traceparent);
    return parent?.sampled ? new AttemptTrace(parent.spanId) : null;
  }

  /** The call's turn came: ends `schedule` and begins `attempt`. */
  scheduled(): void {
    this.scheduledMs = Date.now();
    this.phases.push({
      name: 'sbx.agent.schedule',
      spanId: newSpanId(),
      parentSpanId: this.callSpanId,
      startMs: this.receivedMs,
      endMs: this.scheduledMs,
    });
  }

  /**
   * The tool's work ran from `startedAt` to `endedAt` (the outcome's times) and returned now:
   * `process` is the work, `output` what the tool did after it until it returned.
   */
  worked(startedAt: Date, endedAt: Date): void {
    const begin = this.scheduledMs ?? this.receivedMs;
    const returnedMs = Date.now();
    const startMs = Math.min(Math.max(startedAt.getTime(), begin), returnedMs);
    const endMs = Math.min(Math.max(endedAt.getTime(), startMs), returnedMs);
    this.phases.push({ name: 'sbx.agent.process', spanId: newSpanId(), parentSpanId: this.attemptSpanId, startMs, endMs });
    this.phases.push({
      name: 'sbx.agent.output',
      spanId: newSpanId(),
      parentSpanId: this.attemptSpanId,
      startMs: endMs,
      endMs: returnedMs,
    });
  }

  /** Ends `receipt` (begun at `receiptStartMs`, when given) and `attempt`; returns every span, to send with the result. */
  finish(receiptStartMs?: number): AgentSpan[] {
    const endMs = Date.now();
    if (receiptStartMs !== undefined)
      this.phases.push({
        name: 'sbx.agent.receipt',
        spanId: newSpanId(),
        parentSpanId: this.attemptSpanId,
        startMs: receiptStartMs,
        endMs,
      });
    const attempt: AgentSpan = {
      name: 'sbx.agent.attempt',
      spanId: this.attemptSpanId,
      parentSpanId: this.callSpanId,
      startMs: this.scheduledMs ?? this.receivedMs,
      endMs,
    };
    return [...this.phases, attempt];
  }
}
