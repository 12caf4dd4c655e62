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
}

const Protocol = z.enum(['http/protobuf', 'http/json'], {
  error: 'sbx exports traces over OTLP/HTTP: http/protobuf or http/json (grpc is not supported)',
});
const Millis = z.coerce.number().int().positive();

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
 * The tracing settings `env` asks for, or null when tracing is off. Throws Error (the control
 * plane does not start) for a protocol other than OTLP/HTTP or a timeout that is not a positive
 * number of milliseconds: a setting that cannot be honoured fails loudly.
 */
export function tracingSettings(env: NodeJS.ProcessEnv): TracingSettings | null {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return null;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? 'otlp').split(',').map((e) => e.trim().toLowerCase());
  if (!exporters.includes('otlp')) return null;
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const endpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!tracesEndpoint && !endpoint) return null;
  const url = tracesEndpoint || `${endpoint!.replace(/\/+$/, '')}/v1/traces`;
  const setting = <T>(name: string, schema: z.ZodType<T>, value: string | undefined, fallback: T): T => {
    if (value === undefined || value.trim() === '') return fallback;
    const parsed = schema.safeParse(value.trim());
    if (!parsed.success) throw new Error(`${name}: ${parsed.error.issues[0]?.message ?? 'invalid'} (got ${JSON.stringify(value)})`);
    return parsed.data;
  };
  const protocolName = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const timeoutName = env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT ? 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT' : 'OTEL_EXPORTER_OTLP_TIMEOUT';
  return {
    url,
    protocol: setting(protocolName, Protocol, env[protocolName], 'http/protobuf'),
    headers: parseKeyValueList(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? env.OTEL_EXPORTER_OTLP_HEADERS),
    resource: {
      ...parseKeyValueList(env.OTEL_RESOURCE_ATTRIBUTES),
      'service.name':
        env.OTEL_SERVICE_NAME?.trim() || parseKeyValueList(env.OTEL_RESOURCE_ATTRIBUTES)['service.name'] || 'sbx-control-plane',
    },
    timeoutMs: setting(timeoutName, Millis, env[timeoutName], 10_000),
    scheduleDelayMs: setting('OTEL_BSP_SCHEDULE_DELAY', Millis, env.OTEL_BSP_SCHEDULE_DELAY, 5000),
  };
}
