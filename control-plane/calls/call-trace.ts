/**
 * A call's spans (issue 17 part 3): its `execute_tool` span, from submission to the stored
 * result, named and attributed as the OpenTelemetry semantic conventions for generative AI name
 * tool execution, and the agent's phases of its attempt (contract/trace.ts) under it. The span's
 * ids are drawn when the call is submitted and kept with its intent (`CallTrace`), so whichever
 * control-plane process stores the result records the span, and the agent names it as the parent
 * of its phases.
 */
import { z } from 'zod';
import type { ToolResult } from '../../contract/objects.js';
import { SpanId, TraceId, formatTraceparent, type AgentSpan, type SpanContextIds } from '../../contract/trace.js';
import type { SpanRecord, Tracing } from '../telemetry/tracing.js';

/** The call's `execute_tool` span as stored with its intent: its ids and its parent's span id (null: a root). */
export const CallTrace = z.object({ traceId: TraceId, spanId: SpanId, sampled: z.boolean(), parentSpanId: SpanId.nullable() });
export type CallTrace = z.infer<typeof CallTrace>;

/** The span ids of a call submitted under `parent` (a request's trace context, or null), or undefined when tracing is off. */
export function callTraceOf(tracing: Pick<Tracing, 'child'> | undefined, parent: SpanContextIds | null): CallTrace | undefined {
  const ids = tracing?.child(parent) ?? null;
  return ids === null ? undefined : { ...ids, parentSpanId: parent?.spanId ?? null };
}

/** The job's `traceparent` for the agent: only for a sampled trace (for another, the agent would record nothing). */
export function agentTraceOf(trace: CallTrace | undefined): { traceparent?: string } {
  return trace?.sampled ? { traceparent: formatTraceparent(trace) } : {};
}

/** What of a finished call its spans say. */
interface FinishedCall {
  callId: string;
  leaseId: string;
  tool: string;
  /** ISO-8601, when it was submitted. */
  createdAt: string;
  trace?: CallTrace;
}

/**
 * Records the spans of a call that finished at `endedAt` with `result`: its `execute_tool` span
 * and `agentSpans`, the phases its agent returned, clamped into the call's time; an agent span
 * whose parents do not lead to the call's span is dropped.
 */
export function recordCallSpans(
  tracing: Pick<Tracing, 'record'>,
  call: FinishedCall,
  result: ToolResult,
  endedAt: Date,
  agentSpans: readonly AgentSpan[] = [],
): void {
  const trace = call.trace;
  if (!trace) return;
  const failed = result.status !== 'succeeded';
  const errorType = failed ? (result.error?.code ?? result.status) : null;
  const common = { 'gen_ai.tool.call.id': call.callId, 'sbx.sandbox.id': call.leaseId };
  const spans: SpanRecord[] = [
    {
      name: `execute_tool ${call.tool}`,
      context: trace,
      parentSpanId: trace.parentSpanId,
      startMs: Date.parse(call.createdAt),
      endMs: endedAt.getTime(),
      attributes: {
        ...common,
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': call.tool,
        'gen_ai.tool.type': 'function',
        'sbx.call.status': result.status,
        ...(result.receipt ? { 'sbx.attempt.id': result.receipt.attemptId } : {}),
        ...(result.exitCode !== null ? { 'process.exit.code': result.exitCode } : {}),
        ...(errorType !== null ? { 'error.type': errorType } : {}),
      },
      error: errorType,
    },
  ];
  // The agent runs in the sandbox: its spans are kept only inside the call's time and only as a
  // tree under the call's span (a span whose parent chain does not reach it is dropped).
  const [fromMs, toMs] = [spans[0]!.startMs, spans[0]!.endMs];
  const within = (ms: number): number => Math.min(Math.max(ms, fromMs), toMs);
  const linked = new Set([trace.spanId]);
  for (let added = true; added;) {
    added = false;
    for (const s of agentSpans) {
      if (linked.has(s.spanId) || !linked.has(s.parentSpanId)) continue;
      linked.add(s.spanId);
      added = true;
      spans.push({
        name: s.name,
        context: { traceId: trace.traceId, spanId: s.spanId, sampled: trace.sampled },
        parentSpanId: s.parentSpanId,
        startMs: within(s.startMs),
        endMs: within(Math.max(s.startMs, s.endMs)),
        attributes: common,
        error: null,
      });
    }
  }
  for (const span of spans) tracing.record(span);
}
