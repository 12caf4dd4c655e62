import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../../contract/objects.js';
import type { AgentSpan } from '../../contract/trace.js';
import type { SpanRecord } from '../telemetry/tracing.js';
import { recordCallSpans, type CallTrace } from './call-trace.js';

const trace: CallTrace = { traceId: 'a'.repeat(32), spanId: '1'.repeat(16), sampled: true, parentSpanId: null };
const call = { callId: 'call_1', leaseId: 'sbx_1', tool: 'exec', createdAt: new Date(1_000_000).toISOString(), trace };
const result = { callId: 'call_1', status: 'succeeded', error: null, exitCode: 0, receipt: null } as unknown as ToolResult;
const span = (name: AgentSpan['name'], spanId: string, parentSpanId: string, startMs: number, endMs: number): AgentSpan => ({
  name,
  spanId: spanId.repeat(16),
  parentSpanId: parentSpanId.length === 1 ? parentSpanId.repeat(16) : parentSpanId,
  startMs,
  endMs,
});

function recorded(agentSpans: AgentSpan[]): SpanRecord[] {
  const spans: SpanRecord[] = [];
  recordCallSpans({ record: (s) => void spans.push(s) }, call, result, new Date(1_000_100), agentSpans);
  return spans;
}

describe('recordCallSpans: what an agent (inside the sandbox) may report', () => {
  it('keeps the tree under the call span, in any order of arrival', () => {
    const spans = recorded([
      span('sbx.agent.process', '3', '2', 1_000_010, 1_000_020),
      span('sbx.agent.attempt', '2', '1', 1_000_005, 1_000_090),
    ]);
    expect(spans.map((s) => [s.name, s.parentSpanId])).toEqual([
      ['execute_tool exec', null],
      ['sbx.agent.attempt', '1'.repeat(16)],
      ['sbx.agent.process', '2'.repeat(16)],
    ]);
  });

  it('clamps absurd times into the call window', () => {
    const [, attempt] = recorded([span('sbx.agent.attempt', '2', '1', 1e300, 1.7e308)]);
    expect([attempt!.startMs, attempt!.endMs]).toEqual([1_000_100, 1_000_100]);
    const [, early] = recorded([span('sbx.agent.attempt', '2', '1', 0, 5)]);
    expect([early!.startMs, early!.endMs]).toEqual([1_000_000, 1_000_000]);
  });

  it('drops spans whose parents do not lead to the call span: unknown parent, its children, a span naming itself', () => {
    const spans = recorded([
      span('sbx.agent.attempt', '2', '9', 1_000_005, 1_000_090),
      span('sbx.agent.process', '3', '2', 1_000_010, 1_000_020),
      span('sbx.agent.output', '4', '4', 1_000_010, 1_000_020),
      span('sbx.agent.schedule', '1', '1', 1_000_001, 1_000_002),
    ]);
    expect(spans.map((s) => s.name)).toEqual(['execute_tool exec']);
  });
});
