/**
 * Traces over OTLP/HTTP (issue 17 part 3): the one place that imports OpenTelemetry. sbx's
 * spans are made by its domains as plain records (`SpanRecord`), with times they know — a call's
 * `execute_tool` span is only whole when its result arrives, maybe in another control-plane
 * process than the one that accepted it, and the agent's phases arrive with it — and handed to the
 * SDK's batch processor and OTLP exporter as finished spans. The W3C propagator reads a request's
 * `traceparent`.
 *
 * Conventions: span names and `gen_ai.*` attributes of tool execution follow the OpenTelemetry
 * semantic conventions for generative AI (`execute_tool {gen_ai.tool.name}`); sbx's own
 * attributes are `sbx.*`.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { randomBytes } from 'node:crypto';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, isSpanContextValid, trace, type HrTime } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import type { SpanContextIds } from '../../contract/trace.js';
import { SBX_VERSION } from '../../contract/version.js';
import type { SamplerName, TracingSettings } from './schema.js';

/** How long stopping waits for the last batch to leave: a collector that is down must not hold a shutdown, ms. */
const SHUTDOWN_WAIT_MS = 2000;
/** The one instrumentation scope of sbx's spans. */
const SCOPE = { name: 'sbx', version: SBX_VERSION };

/** The SDK's sampler of `OTEL_TRACES_SAMPLER` `name` (the specification's names). */
function samplerOf(name: SamplerName, ratio: number): Sampler {
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off')
      ? new AlwaysOffSampler()
      : new TraceIdRatioBasedSampler(ratio);
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** Attribute values sbx records: strings, numbers, booleans. */
export type SpanAttributes = Record<string, string | number | boolean>;

/** A finished span as a domain describes it. */
export interface SpanRecord {
  name: string;
  /** Its own ids (from `Tracing.child`). */
  context: SpanContextIds;
  /** Its parent's span id in the same trace; null for a root. */
  parentSpanId: string | null;
  /** `server` for the span of an API request's whole work; default `internal`. */
  kind?: 'internal' | 'server';
  /** Wall-clock start and end, ms since the Unix epoch (fractions allowed). */
  startMs: number;
  endMs: number;
  attributes: SpanAttributes;
  /** Set: the span's status is ERROR with this description (an sbx error code); null: OK. */
  error: string | null;
}

/** What domains use to trace: off (every method a no-op) unless OTLP is configured. */
export interface Tracing {
  readonly enabled: boolean;
  /**
   * The span context a request's `traceparent` (and `tracestate`) names; null when there is none
   * or it is malformed — then the request's spans start a trace of their own (never an error).
   */
  parentOf(headers: IncomingHttpHeaders): SpanContextIds | null;
  /** Ids for a new span: a child of `parent` (its trace, its sampling), or a new sampled root; null when tracing is off. */
  child(parent: SpanContextIds | null): SpanContextIds | null;
  /** Queues a finished span for export; spans of unsampled traces are dropped. Never throws. */
  record(span: SpanRecord): void;
  /** Exports what is queued and stops: waits at most SHUTDOWN_WAIT_MS (a collector that is down loses the last batch). */
  shutdown(): Promise<void>;
}

/** Tracing off: the default. */
export const TRACING_OFF: Tracing = {
  enabled: false,
  parentOf: () => null,
  child: () => null,
  record: () => undefined,
  shutdown: async () => undefined,
};

const propagator = new W3CTraceContextPropagator();
const headerGetter = {
  keys: (carrier: IncomingHttpHeaders) => Object.keys(carrier),
  get: (carrier: IncomingHttpHeaders, key: string) => carrier[key],
};

/** `bytes` random bytes as hex, never all zero (W3C Trace Context ids). */
function randomId(bytes: number): string {
  for (;;) {
    const id = randomBytes(bytes).toString('hex');
    if (/[^0]/.test(id)) return id;
  }
}

/** Milliseconds since the epoch as OpenTelemetry's [seconds, nanoseconds]. */
function hrTime(ms: number): HrTime {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.min(999_999_999, Math.floor((ms - seconds * 1000) * 1e6))];
}

/** Tracing that exports to the collector `settings` names, or TRACING_OFF for null settings. */
export function createTracing(settings: TracingSettings | null): Tracing {
  if (settings === null) return TRACING_OFF;
  const options = { url: settings.url, headers: settings.headers, timeoutMillis: settings.timeoutMs };
  const exporter: SpanExporter = settings.protocol === 'http/json' ? new JsonTraceExporter(options) : new ProtobufTraceExporter(options);
  const processor = new BatchSpanProcessor({
    exporter,
    scheduledDelayMillis: settings.scheduleDelayMs,
    exportTimeoutMillis: settings.timeoutMs,
  });
  const resource = resourceFromAttributes(settings.resource);
  const sampler = samplerOf(settings.sampler.name, settings.sampler.ratio);
  return {
    enabled: true,
    parentOf(headers) {
      const context = trace.getSpanContext(propagator.extract(ROOT_CONTEXT, headers, headerGetter));
      if (!context || !isSpanContextValid(context)) return null;
      return {
        traceId: context.traceId,
        spanId: context.spanId,
        sampled: (context.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED,
      };
    },
    child(parent) {
      const traceId = parent?.traceId ?? randomId(16);
      const flags = parent?.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE;
      const context = parent
        ? trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: parent.spanId, traceFlags: flags, isRemote: true })
        : ROOT_CONTEXT;
      const { decision } = sampler.shouldSample(context, traceId, '', SpanKind.INTERNAL, {}, []);
      return { traceId, spanId: randomId(8), sampled: decision === SamplingDecision.RECORD_AND_SAMPLED };
    },
    record(span) {
      if (!span.context.sampled) return;
      try {
        processor.onEnd(readableSpan(span, resource));
      } catch {
        // Telemetry never fails the work it describes.
      }
    },
    shutdown: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, SHUTDOWN_WAIT_MS).unref();
        void processor
          .shutdown()
          .catch(() => undefined)
          .finally(() => {
            clearTimeout(timer);
            resolve();
          });
      }),
  };
}

/** `span` in the shape the SDK's processors and exporters take. */
function readableSpan(span: SpanRecord, resource: Resource): ReadableSpan {
  const { traceId, spanId } = span.context;
  const endMs = Math.max(span.endMs, span.startMs);
  return {
    name: span.name,
    kind: span.kind === 'server' ? SpanKind.SERVER : SpanKind.INTERNAL,
    spanContext: () => ({ traceId, spanId, traceFlags: TraceFlags.SAMPLED }),
    parentSpanContext:
      span.parentSpanId === null ? undefined : { traceId, spanId: span.parentSpanId, traceFlags: TraceFlags.SAMPLED, isRemote: true },
    startTime: hrTime(span.startMs),
    endTime: hrTime(endMs),
    duration: hrTime(endMs - span.startMs),
    // Success leaves the status unset, as the specification asks of instrumentation.
    status: span.error === null ? { code: SpanStatusCode.UNSET } : { code: SpanStatusCode.ERROR, message: span.error },
    attributes: span.attributes,
    links: [],
    events: [],
    ended: true,
    resource,
    instrumentationScope: SCOPE,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}

/**
 * Runs `work` as a span named `name`, a child of `parent`: recorded when it settles, with
 * `attributes` and those `more` derives from its value, its error code (`code` of an AppError,
 * else the error's name) when it throws. Returns or throws what `work` does.
 */
export async function traced<T>(
  tracing: Tracing,
  parent: SpanContextIds | null,
  name: string,
  attributes: SpanAttributes,
  work: () => Promise<T>,
  more: (value: T) => SpanAttributes = () => ({}),
): Promise<T> {
  const context = tracing.child(parent);
  if (context === null) return work();
  const startMs = Date.now();
  const record = (extra: SpanAttributes, error: string | null): void =>
    tracing.record({
      name,
      context,
      parentSpanId: parent?.spanId ?? null,
      startMs,
      endMs: Date.now(),
      attributes: { ...attributes, ...extra },
      error,
    });
  try {
    const value = await work();
    record(more(value), null);
    return value;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const type = typeof code === 'string' ? code : (err as Error).name;
    record({ 'error.type': type }, type);
    throw err;
  }
}
