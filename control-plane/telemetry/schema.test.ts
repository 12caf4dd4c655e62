import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseKeyValueList, tracingSettings } from './schema.js';

describe('tracing settings from OTEL_* variables', () => {
  it('are off without an endpoint, with OTEL_SDK_DISABLED=true, and with OTEL_TRACES_EXPORTER=none', () => {
    expect(tracingSettings({})).toBeNull();
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'TRUE' })).toBeNull();
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeNull();
  });

  it('append /v1/traces to the base endpoint and take the traces endpoint as given', () => {
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' })?.url).toBe('http://c:4318/v1/traces');
    expect(
      tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:9/custom' })?.url,
    ).toBe('http://t:9/custom');
  });

  it('default to http/protobuf, service sbx-control-plane, a 10 s timeout and a 5 s batch delay', () => {
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toEqual({
      url: 'http://c:4318/v1/traces',
      protocol: 'http/protobuf',
      headers: {},
      resource: { 'service.name': 'sbx-control-plane' },
      timeoutMs: 10_000,
      scheduleDelayMs: 5000,
      sampler: { name: 'parentbased_always_on', ratio: 1 },
    });
  });

  it('read headers and resource attributes as percent-encoded key=value lists; OTEL_SERVICE_NAME wins', () => {
    const s = tracingSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20abc, x-tenant = t1,broken',
      OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attrs,deployment.environment=ci',
      OTEL_SERVICE_NAME: 'sbx-eu',
    });
    expect(s?.headers).toEqual({ authorization: 'Bearer abc', 'x-tenant': 't1' });
    expect(s?.resource).toEqual({ 'service.name': 'sbx-eu', 'deployment.environment': 'ci' });
    expect(parseKeyValueList('k=%E0%A4%A')).toEqual({ k: '%E0%A4%A' });
  });

  it('refuse grpc and a timeout that is not a positive number of ms, naming the variable', () => {
    expect(() => tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL: .*grpc is not supported/,
    );
    expect(() => tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '-1' })).toThrow(
      /OTEL_EXPORTER_OTLP_TRACES_TIMEOUT/,
    );
  });

  it('take an empty value as unset, so the general variable or the default applies', () => {
    const s = tracingSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_TRACES_EXPORTER: '',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: '',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=k',
      OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: ' ',
      OTEL_EXPORTER_OTLP_TIMEOUT: '500',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
    });
    expect([s?.url, s?.headers, s?.timeoutMs]).toEqual(['http://c:4318/v1/traces', { authorization: 'k' }, 500]);
  });

  it('refuse an endpoint without http(s), a timeout Node cannot keep, an unknown sampler and a ratio outside 0..1', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(() => tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT: must be an http/,
    );
    expect(() => tracingSettings({ ...base, OTEL_EXPORTER_OTLP_TIMEOUT: '3000000000' })).toThrow(/OTEL_EXPORTER_OTLP_TIMEOUT/);
    expect(() => tracingSettings({ ...base, OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toThrow(/OTEL_TRACES_SAMPLER: one of always_on/);
    expect(() => tracingSettings({ ...base, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' })).toThrow(
      /OTEL_TRACES_SAMPLER_ARG/,
    );
    expect(tracingSettings({ ...base, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })?.sampler).toEqual(
      {
        name: 'parentbased_traceidratio',
        ratio: 0.25,
      },
    );
  });

  it('are each documented in the README section on traces', () => {
    const read = (path: string): string => readFileSync(new URL(path, import.meta.url), 'utf8');
    const readme = read('../../README.md');
    const section = readme.slice(readme.indexOf('### Traces (OpenTelemetry)'), readme.indexOf('### The `exec` tool'));
    const variables = [...new Set([...read('./schema.ts').matchAll(/\bOTEL_[A-Z_]+\b/g)].map((m) => m[0]))];
    expect(variables.length).toBeGreaterThan(8);
    expect(variables.filter((v) => !section.includes(`\`${v}\``))).toEqual([]);
  });
});
