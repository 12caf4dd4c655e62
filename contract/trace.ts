/**
 * Trace context between the control plane and the agent (issue 17 part 3). The control plane
 * makes each call's `execute_tool` span and sends its W3C trace context with the call
 * (`CallJob.traceparent`); the agent times its phases of the attempt and returns them as spans of
 * that trace with the result (`AgentSpan`); the control plane exports them all
 * (control-plane/telemetry/). The agent needs no tracing library and no route to a collector.
 *
 * Format: W3C Trace Context level 1, `traceparent` header, version 00
 * (https://www.w3.org/TR/trace-context/#traceparent-header).
 */
import { z } from 'zod';

/** A trace id: 32 lower-case hex digits, not all zero. */
export const TraceId = z.string().regex(/^(?!0{32})[0-9a-f]{32}$/);
/** A span id: 16 lower-case hex digits, not all zero. */
export const SpanId = z.string().regex(/^(?!0{16})[0-9a-f]{16}$/);

/** A span's place in a trace: the ids others name as their parent, and whether the trace is sampled. */
export interface SpanContextIds {
  traceId: string;
  spanId: string;
  /** The W3C `sampled` flag: spans of an unsampled trace are not recorded. */
  sampled: boolean;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A `traceparent` value as the control plane sends it to an agent (version 00, lower-case). */
export const Traceparent = z.string().regex(TRACEPARENT);

/** `ids` as a `traceparent` value. */
export function formatTraceparent(ids: SpanContextIds): string {
  return `00-${ids.traceId}-${ids.spanId}-${ids.sampled ? '01' : '00'}`;
}

/**
 * The span context a version-00 `traceparent` names, or null for anything else (ids all zero,
 * upper case, another length). Headers from clients go through the control plane's propagator
 * instead (control-plane/telemetry/tracing.ts), which also takes future versions.
 */
export function parseTraceparent(value: string): SpanContextIds | null {
  const m = TRACEPARENT.exec(value);
  if (!m || !TraceId.safeParse(m[1]).success || !SpanId.safeParse(m[2]).success) return null;
  return { traceId: m[1]!, spanId: m[2]!, sampled: (Number.parseInt(m[3]!, 16) & 1) === 1 };
}

/**
 * The phases of an attempt the agent reports, each a span: `schedule` (the call received, waiting
 * for its turn: conflicting accesses, the scheduler's order), `attempt` (its turn to its result:
 * the attempt marker, the tool, the receipt), and inside the attempt `process` (the tool's work: a
 * process from spawn to exit, or a file operation), `output` (after the work: output kept and
 * spooled, artifacts offered) and `receipt` (the receipt and result built).
 */
export const AGENT_SPAN_NAMES = [
  'sbx.agent.schedule',
  'sbx.agent.attempt',
  'sbx.agent.process',
  'sbx.agent.output',
  'sbx.agent.receipt',
] as const;

/** The most spans one result carries. */
export const MAX_AGENT_SPANS = 8;

/**
 * One phase of an attempt as a span of the call's trace: its id, its parent (the call's span or
 * the attempt's), and wall-clock start and end in milliseconds since the Unix epoch (fractions
 * are sub-millisecond).
 */
export const AgentSpan = z.object({
  name: z.enum(AGENT_SPAN_NAMES),
  spanId: SpanId,
  parentSpanId: SpanId,
  startMs: z.number().nonnegative(),
  endMs: z.number().nonnegative(),
});
export type AgentSpan = z.infer<typeof AgentSpan>;
