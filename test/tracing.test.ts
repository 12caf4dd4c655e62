/**
 * OpenTelemetry traces (issue 17 part 3) against a real control plane, a real sandbox and an
 * OTLP/HTTP receiver inside the test: a call submitted with a `traceparent` becomes one connected
 * tree — the client's span → `execute_tool exec` (GenAI attributes) → the agent's `schedule` and
 * `attempt` → `process`, `output`, `receipt` — each child inside its parent's time; lease create
 * and release are spans under their requests' `traceparent`; a malformed `traceparent` is ignored
 * (the call starts a trace of its own, never an error); protobuf, the specification's default
 * protocol, arrives decodable.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiAs, startHarness, startOtlpReceiver, useHarness, type OtlpReceiver, type ReceivedSpan } from './fixtures/index.js';

let receiver: OtlpReceiver;
beforeAll(async () => {
  receiver = await startOtlpReceiver();
});
afterAll(async () => receiver?.close());

// A short batch delay: spans leave within 100 ms instead of the default 5 s.
const h = useHarness(() => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_BSP_SCHEDULE_DELAY: '100',
  OTEL_SERVICE_NAME: 'sbx-under-test',
}));
const api = apiAs(() => h.url);

/** A client's span context: what an instrumented agent framework sends as `traceparent`. */
function clientSpan(): { traceId: string; spanId: string; traceparent: string } {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

const inTrace = (spans: ReceivedSpan[], traceId: string): ReceivedSpan[] => spans.filter((s) => s.traceId === traceId);
const named = (spans: ReceivedSpan[], name: string): ReceivedSpan => {
  const found = spans.filter((s) => s.name === name);
  expect(found.map((s) => s.name)).toEqual([name]);
  return found[0]!;
};
/** `child` is `parent`'s child and lies inside its time (1 ms of slack: the agent's clock is read in whole ms). */
function expectChildOf(child: ReceivedSpan, parent: ReceivedSpan): void {
  expect(child.parentSpanId).toBe(parent.spanId);
  expect(child.startNs).toBeGreaterThanOrEqual(parent.startNs - 1_000_000n);
  expect(child.endNs).toBeLessThanOrEqual(parent.endNs + 1_000_000n);
  expect(child.endNs).toBeGreaterThanOrEqual(child.startNs);
}

describe('OpenTelemetry traces', () => {
  let leaseId: string;
  const leaseTrace = clientSpan();

  it('lease create is a span under the request traceparent', async () => {
    const created = await api(h.apiKey, 'POST', '/v1/sandboxes', {}, { traceparent: leaseTrace.traceparent });
    expect(created.status).toBe(201);
    leaseId = (created.body as { id: string }).id;
    const spans = await receiver.until((all) => inTrace(all, leaseTrace.traceId).some((s) => s.name === 'sbx.lease.create'));
    const create = named(inTrace(spans, leaseTrace.traceId), 'sbx.lease.create');
    expect(create.parentSpanId).toBe(leaseTrace.spanId);
    expect(create.attributes).toMatchObject({ 'sbx.sandbox.id': leaseId, 'sbx.policy.name': 'default', 'sbx.lease.replayed': false });
    expect(create.statusCode).toBe(0); // unset: success
    expect(create.service).toBe('sbx-under-test');
  });

  it('one call is one connected tree: client span → execute_tool → the agent phases of its attempt', async () => {
    const client = clientSpan();
    const res = await api(
      h.apiKey,
      'POST',
      `/v1/sandboxes/${leaseId}/calls?wait=60`,
      { tool: 'exec', args: { argv: ['sh', '-c', 'echo traced'] } },
      {
        traceparent: client.traceparent,
      },
    );
    expect(res.status).toBe(200);
    const result = res.body as { callId: string; status: string; receipt: { attemptId: string } };
    expect(result.status).toBe('succeeded');
    const names = [
      'execute_tool exec',
      'sbx.agent.schedule',
      'sbx.agent.attempt',
      'sbx.agent.process',
      'sbx.agent.output',
      'sbx.agent.receipt',
    ];
    const spans = inTrace(
      await receiver.until((all) => names.every((n) => inTrace(all, client.traceId).some((s) => s.name === n))),
      client.traceId,
    );
    expect(spans.map((s) => s.name).sort()).toEqual([...names].sort());

    const tool = named(spans, 'execute_tool exec');
    expect(tool.parentSpanId).toBe(client.spanId);
    expect(tool.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'exec',
      'gen_ai.tool.call.id': result.callId,
      'sbx.sandbox.id': leaseId,
      'sbx.call.status': 'succeeded',
      'sbx.attempt.id': result.receipt.attemptId,
      'process.exit.code': 0,
    });
    expect(tool.statusCode).toBe(0);
    const attempt = named(spans, 'sbx.agent.attempt');
    expectChildOf(named(spans, 'sbx.agent.schedule'), tool);
    expectChildOf(attempt, tool);
    for (const phase of ['sbx.agent.process', 'sbx.agent.output', 'sbx.agent.receipt']) expectChildOf(named(spans, phase), attempt);
    expect(new Set(spans.map((s) => s.spanId)).size).toBe(spans.length);
    // The trace id is not part of the API's view of the call.
    const view = await api(h.apiKey, 'GET', `/v1/sandboxes/${leaseId}/calls/${result.callId}`);
    expect(Object.keys(view.body as object)).not.toContain('trace');
  });

  it('a failed call is an execute_tool span with status ERROR and its error.type', async () => {
    const client = clientSpan();
    const res = await api(
      h.apiKey,
      'POST',
      `/v1/sandboxes/${leaseId}/calls?wait=60`,
      { tool: 'read_file', args: { path: '/workspace/no-such-file' } },
      {
        traceparent: client.traceparent,
      },
    );
    expect(res.status).toBe(200);
    const result = res.body as { status: string; error: { code: string } };
    expect(result.status).toBe('failed');
    const spans = await receiver.until((all) => inTrace(all, client.traceId).some((s) => s.name === 'execute_tool read_file'));
    const tool = named(inTrace(spans, client.traceId), 'execute_tool read_file');
    expect([tool.statusCode, tool.attributes['error.type']]).toEqual([2, result.error.code]);
  });

  it('a malformed traceparent is ignored: the call succeeds and its span starts a trace of its own', async () => {
    const before = new Set(receiver.spans.map((s) => s.traceId));
    for (const bad of [
      'garbage',
      '00-00000000000000000000000000000000-0000000000000000-01',
      `00-${'A'.repeat(32)}-${'b'.repeat(16)}-01`,
      'x'.repeat(5000),
    ]) {
      const res = await api(
        h.apiKey,
        'POST',
        `/v1/sandboxes/${leaseId}/calls?wait=60`,
        { tool: 'exec', args: { argv: ['true'] } },
        { traceparent: bad },
      );
      expect(res.status).toBe(200);
      const callId = (res.body as { callId: string }).callId;
      const spans = await receiver.until((all) =>
        all.some((s) => s.attributes['gen_ai.tool.call.id'] === callId && s.name === 'execute_tool exec'),
      );
      const tool = spans.find((s) => s.attributes['gen_ai.tool.call.id'] === callId && s.name === 'execute_tool exec')!;
      expect(tool.parentSpanId).toBe('');
      expect(before.has(tool.traceId)).toBe(false);
    }
  });

  it('lease release is a span under the request traceparent', async () => {
    const release = clientSpan();
    expect((await api(h.apiKey, 'DELETE', `/v1/sandboxes/${leaseId}`, undefined, { traceparent: release.traceparent })).status).toBe(200);
    const spans = await receiver.until((all) => inTrace(all, release.traceId).some((s) => s.name === 'sbx.lease.release'));
    const span = named(inTrace(spans, release.traceId), 'sbx.lease.release');
    expect([span.parentSpanId, span.attributes['sbx.sandbox.id']]).toEqual([release.spanId, leaseId]);
  });
});

describe('OpenTelemetry traces over http/protobuf (the default protocol)', () => {
  it('spans arrive as protobuf and decode to the same tree', async () => {
    const proto = await startOtlpReceiver();
    const plane = await startHarness({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${proto.url}/v1/traces`, OTEL_BSP_SCHEDULE_DELAY: '100' });
    try {
      const client = clientSpan();
      const created = await apiAs(() => plane.url)(plane.apiKey, 'POST', '/v1/sandboxes', {}, { traceparent: client.traceparent });
      expect(created.status).toBe(201);
      const spans = await proto.until((all) => inTrace(all, client.traceId).some((s) => s.name === 'sbx.lease.create'));
      expect(named(inTrace(spans, client.traceId), 'sbx.lease.create').parentSpanId).toBe(client.spanId);
      expect(proto.contentTypes.every((t) => t === 'application/x-protobuf')).toBe(true);
      expect(named(inTrace(spans, client.traceId), 'sbx.lease.create').service).toBe('sbx-control-plane');
    } finally {
      await plane.close();
      await proto.close();
    }
  });
});
