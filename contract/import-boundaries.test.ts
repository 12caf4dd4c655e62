/**
 * Adapters own their libraries: a test that fails when an import crosses the
 * lines between the parts of the architecture.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = new URL('..', import.meta.url).pathname;

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) return sources(path);
    return path.endsWith('.ts') && !path.endsWith('.test.ts') ? [path] : [];
  });
}

const files = ['contract', 'control-plane', 'sandbox-agent', 'sdk', 'cli'].flatMap(sources);
const importsOf = (file: string): string[] =>
  [...readFileSync(join(root, file), 'utf8').matchAll(/^import[^'"]*['"]([^'"]+)['"]/gm)].map((m) => m[1]!);

/** A domain's fastify plugin (`control-plane/<domain>/routes.ts`) and its Redis adapter (`control-plane/<domain>/store.ts`). */
const DOMAIN_ROUTES = /^control-plane\/[a-z0-9-]+\/routes\.ts$/;
const DOMAIN_STORE = /^control-plane\/[a-z0-9-]+\/store\.ts$/;

/** Package → the only places that may import it: path prefixes, or patterns of file paths. */
const OWNERS: Record<string, Array<string | RegExp>> = {
  dockerode: ['control-plane/runtime/'],
  'tar-fs': ['sdk/client.ts'],
  'eventsource-parser': ['sdk/client.ts', 'sdk/watch.ts'],
  '@modelcontextprotocol/sdk': ['cli/mcp.ts', 'sdk/mcp-server.ts', 'sdk/mcp-shell.ts', 'control-plane/mcp/'],
  'tar-stream': ['control-plane/files/tar-guard.ts', 'control-plane/runtime/'],
  // Durable timers only: the agent channel is plain Redis streams (contract/queue.ts).
  bullmq: ['control-plane/redis/timers.ts'],
  // The same, each domain's store, and the agent's own Redis writers (its link).
  ioredis: ['control-plane/redis/', 'control-plane/agent-link/', DOMAIN_STORE, 'sandbox-agent/main.ts', 'sandbox-agent/link/'],
  fastify: ['control-plane/app.ts', 'control-plane/control-plane.ts', 'control-plane/http/', DOMAIN_ROUTES],
  'better-sse': ['control-plane/http/sse.ts'],
  // Certificates of the lease CAs of credential injection.
  'node-forge': ['control-plane/egress/ca.ts'],
  'prom-client': ['control-plane/metrics/service.ts'],
  busboy: ['control-plane/e2b/routes.ts'],
  '@opentelemetry/api': ['control-plane/telemetry/'],
  '@opentelemetry/core': ['control-plane/telemetry/'],
  '@opentelemetry/resources': ['control-plane/telemetry/'],
  '@opentelemetry/sdk-trace': ['control-plane/telemetry/'],
  '@opentelemetry/exporter-trace-otlp-http': ['control-plane/telemetry/'],
  '@opentelemetry/exporter-trace-otlp-proto': ['control-plane/telemetry/'],
  '@fastify/static': ['control-plane/console/routes.ts'],
  '@fastify/swagger': ['control-plane/http/openapi.ts'],
  '@fastify/swagger-ui': ['control-plane/http/openapi.ts'],
  'fastify-type-provider-zod': ['control-plane/http/', DOMAIN_ROUTES],
};
const owns = (owner: string | RegExp, file: string): boolean =>
  typeof owner === 'string' ? file === owner || file.startsWith(owner) : owner.test(file);

describe('import boundaries', () => {
  it('each infrastructure library is imported only by the adapter that owns it', () => {
    const crossings: string[] = [];
    for (const file of files) {
      for (const spec of importsOf(file)) {
        const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        const owners = OWNERS[pkg];
        if (owners && !owners.some((o) => owns(o, file))) crossings.push(`${file} imports ${pkg}`);
      }
    }
    expect(crossings).toEqual([]);
  });

  it('the contract depends on neither side; the agent and the control plane do not import each other; the SDK and the CLI use only the contract', () => {
    const crossings: string[] = [];
    for (const file of files) {
      for (const spec of importsOf(file).filter((s) => s.startsWith('.'))) {
        const target = relative(root, join(root, file, '..', spec));
        const from = file.split('/')[0];
        const to = target.split('/')[0];
        if (from === 'contract' && to !== 'contract') crossings.push(`${file} → ${target}`);
        if (from === 'sandbox-agent' && to === 'control-plane') crossings.push(`${file} → ${target}`);
        if (from === 'control-plane' && to === 'sandbox-agent') crossings.push(`${file} → ${target}`);
        // The SDK ships to users' machines: nothing of the server may come with it.
        if ((from === 'sdk' || from === 'cli') && (to === 'control-plane' || to === 'sandbox-agent')) crossings.push(`${file} → ${target}`);
      }
    }
    expect(crossings).toEqual([]);
  });
});
