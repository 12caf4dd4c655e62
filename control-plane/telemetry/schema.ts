/**
 * Tracing settings from the standard OpenTelemetry variables (the OpenTelemetry specification's
 * "Environment Variable Specification" and "OTLP Exporter Configuration"). Off by default: traces
 * are exported only when an OTLP endpoint is set and neither `OTEL_SDK_DISABLED=true` nor
 * `OTEL_TRACES_EXPORTER=none` says otherwise.
 */
import { z } from 'zod';

/** What tracing.ts needs to export: where, how, as whom. */
export interface TracingSettings {
  /** The traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`). */
  url: string;
  /** `http/protobuf` (the specification's default) or `http/json`. */
  protocol: 'http/protobuf' | 'http/json';
  /** Request headers (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`). */
  headers: Record<string, string>;
  /** `service.name` (`OTEL_SERVICE_NAME`, default `sbx-control-plane`) and `OTEL_RESOURCE_ATTRIBUTES`. */
  resource: Record<string, string>;
  /** Time to wait for one export, ms (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`; default 10 000). */
  timeoutMs: number;
  /** Delay between two batches, ms (`OTEL_BSP_SCHEDULE_DELAY`, default 5000). */
  scheduleDelayMs: number;
  /** `OTEL_TRACES_SAMPLER` (default `parentbased_always_on`) and, for the ratio samplers, `OTEL_TRACES_SAMPLER_ARG` (0 to 1, default 1). */
  sampler: { name: SamplerName; ratio: number };
}

/** The samplers of the specification sbx offers (`OTEL_TRACES_SAMPLER`). */
export const SAMPLER_NAMES = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type SamplerName = (typeof SAMPLER_NAMES)[number];

const Protocol = z.enum(['http/protobuf', 'http/json'], {
  error: 'sbx exports traces over OTLP/HTTP: http/protobuf or http/json (grpc is not supported)',
});
// Node's timers take at most 2^31 - 1 ms (a longer one fires after 1 ms).
const Millis = z.coerce.number().int().positive().max(2_147_483_647);
const Endpoint = z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' });
const Sampler = z.enum(SAMPLER_NAMES, { error: `one of ${SAMPLER_NAMES.join(', ')}` });
const Ratio = z.coerce.number().min(0).max(1);

/** A variable's value, trimmed; undefined when unset or empty (the specification: an empty value is unset). */
function valueOf(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
}

/**
 * A W3C Baggage-style list (`key1=value1,key2=value2`, values percent-encoded), the format of
 * `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`. Entries without `=` are skipped.
 */
export function parseKeyValueList(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of (text ?? '').split(',')) {
    const at = entry.indexOf('=');
    if (at <= 0) continue;
    const key = entry.slice(0, at).trim();
    const raw = entry.slice(at + 1).trim();
    let value = raw;
    try {
      value = decodeURIComponent(raw);
    } catch {
      // A bad escape is kept as written: the variable said so, and the collector will tell.
    }
    if (key !== '') out[key] = value;
  }
  return out;
}

/**
 * The tracing settings `env` asks for, or null when tracing is off. Throws Error naming the
 * variable (the control plane does not start) for an endpoint that is not an http(s) URL, a
 * protocol other than OTLP/HTTP, a timeout that is not 1 to 2^31 - 1 ms, a sampler sbx does not
 * offer or a ratio outside 0 to 1: a setting that cannot be honoured fails loudly.
 */
export function tracingSettings(env: NodeJS.ProcessEnv): TracingSettings | null {
  if (valueOf(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  const exporters = (valueOf(env, 'OTEL_TRACES_EXPORTER') ?? 'otlp').split(',').map((e) => e.trim().toLowerCase());
  if (!exporters.includes('otlp')) return null;
  // The signal's own variable wins over the general one (OTLP Exporter Configuration).
  const either = (specific: string, general: string): string => (valueOf(env, specific) !== undefined ? specific : general);
  const setting = <T>(name: string, schema: z.ZodType<T>, fallback: T): T => {
    const value = valueOf(env, name);
    if (value === undefined) return fallback;
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw new Error(`${name}: ${parsed.error.issues[0]?.message ?? 'invalid'} (got ${JSON.stringify(value)})`);
    return parsed.data;
  };
  const endpointName = either('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const endpoint = setting<string | null>(endpointName, Endpoint, null);
  if (endpoint === null) return null;
  const url = endpointName === 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' ? endpoint : `${endpoint.replace(/\/+$/, '')}/v1/traces`;
  const attributes = parseKeyValueList(valueOf(env, 'OTEL_RESOURCE_ATTRIBUTES'));
  return {
    url,
    protocol: setting(either('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL'), Protocol, 'http/protobuf'),
    headers: parseKeyValueList(valueOf(env, either('OTEL_EXPORTER_OTLP_TRACES_HEADERS', 'OTEL_EXPORTER_OTLP_HEADERS'))),
    resource: { ...attributes, 'service.name': valueOf(env, 'OTEL_SERVICE_NAME') ?? attributes['service.name'] ?? 'sbx-control-plane' },
    timeoutMs: setting(either('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT'), Millis, 10_000),
    scheduleDelayMs: setting('OTEL_BSP_SCHEDULE_DELAY', Millis, 5000),
    sampler: {
      name: setting('OTEL_TRACES_SAMPLER', Sampler, 'parentbased_always_on'),
      ratio: setting('OTEL_TRACES_SAMPLER_ARG', Ratio, 1),
    },
  };
}
