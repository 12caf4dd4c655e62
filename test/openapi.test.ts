/**
 * The OpenAPI document is generated from the routes' own zod schemas: every route fastify has is
 * in it, its example requests pass the real routes' validation, and it and the docs UI need no key.
 */
import { describe, expect, it } from 'vitest';
import { routesOf, useHarness } from './fixtures/index.js';

const h = useHarness();

interface Operation {
  summary?: string;
  security?: unknown[];
  parameters?: Array<{ in: string; name: string; required?: boolean; schema?: Record<string, unknown> }>;
  requestBody?: {
    content: Record<string, { schema?: { examples?: unknown[] }; example?: unknown; examples?: Record<string, { value: unknown }> }>;
  };
}
type Document = { openapi: string; paths: Record<string, Record<string, Operation>> };

async function openapi(): Promise<Document> {
  const response = await fetch(`${h.url}/openapi.json`);
  expect(response.status).toBe(200);
  return (await response.json()) as Document;
}

/** `/v1/sandboxes/:id` → `/v1/sandboxes/{id}`, as OpenAPI writes paths. */
const openapiPath = (path: string): string => path.replace(/:([A-Za-z]+)/g, '{$1}').replace(/\/\*$/, '/{*}');

/** Every example of a request body, whichever way the document holds it. */
function bodyExamples(op: Operation): unknown[] {
  return Object.values(op.requestBody?.content ?? {}).flatMap((media) => [
    ...(media.schema?.examples ?? []),
    ...(media.example === undefined ? [] : [media.example]),
    ...Object.values(media.examples ?? {}).map((e) => e.value),
  ]);
}

describe('OpenAPI document', () => {
  it('is OpenAPI 3.1, served with no API key, and lists every route fastify has (docs UI and console pages aside)', async () => {
    const doc = await openapi();
    expect(doc.openapi).toBe('3.1.0');
    // The two browser UIs serve pages, not API operations.
    const ui = (path: string): boolean =>
      ['/docs', '/console'].some((p) => path === p || path.startsWith(`${p}/`) || path.startsWith(`${p}*`));
    // WebSocket routes are hidden by @fastify/websocket (no OpenAPI for an upgrade); the README documents
    // them: a terminal's attach with an API key and its signed-URL twin for browsers.
    const websocket = (path: string): boolean => path.endsWith('/ws') || path.startsWith('/v1/terminal-ws/');
    // The E2B-compatible API speaks E2B's protocol, specified by E2B (docs/e2b.md), not in sbx's document.
    const e2b = (path: string): boolean => path.startsWith('/e2b/');
    const routes = routesOf(h.plane.app).filter((r) => !ui(r.path) && !websocket(r.path) && !e2b(r.path));
    expect(routes.length).toBeGreaterThan(30);
    const missing = routes
      .filter((r) => doc.paths[openapiPath(r.path)]?.[r.method.toLowerCase()] === undefined)
      .map((r) => `${r.method} ${r.path}`);
    expect(missing).toEqual([]);
    // Every operation says what it does, and only the public ones waive the API key.
    const publicOps: string[] = [];
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        expect(op.summary, `${method} ${path}`).toBeTruthy();
        if (op.security?.length === 0) publicOps.push(`${method.toUpperCase()} ${path}`);
      }
    }
    // Signed preview URLs carry their own credential (the token in the path or the preview host's cookie).
    const previewOps = ['/v1/previews/{id}/{token}/{*}', '/v1/host-previews/{id}/{port}/{*}'].flatMap((path) =>
      ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'].map((m) => `${m} ${path}`),
    );
    expect(publicOps.sort()).toEqual(
      [
        'GET /healthz',
        'GET /metrics',
        'GET /openapi.json',
        'GET /v1/previews/{id}/{token}',
        'GET /v1/host-previews/{id}/{port}',
        ...previewOps,
      ].sort(),
    );
  });

  it('describes inputs from the validating schemas: path parameters, query parameters, body fields', async () => {
    const doc = await openapi();
    const list = doc.paths['/v1/sandboxes']!.get!;
    expect(
      list.parameters
        ?.filter((p) => p.in === 'query')
        .map((p) => p.name)
        .sort(),
    ).toEqual(['label', 'status']);
    const submit = doc.paths['/v1/sandboxes/{id}/calls']!.post!;
    expect(submit.parameters?.find((p) => p.in === 'path' && p.name === 'id')?.required).toBe(true);
    expect(submit.parameters?.find((p) => p.in === 'query' && p.name === 'wait')?.schema).toMatchObject({ maximum: 300 });
    const create = JSON.stringify(doc.paths['/v1/sandboxes']!.post!.requestBody);
    for (const field of ['policy', 'ttlSeconds', 'env', 'secrets', 'labels']) expect(create).toContain(`"${field}"`);
    expect(doc.paths['/v1/sandboxes']!.post!.parameters?.map((p) => p.name)).toContain('idempotency-key');
  });

  it('every example request in the document passes the route it belongs to (no input.* error)', async () => {
    const doc = await openapi();
    const checked: string[] = [];
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        // Path parameters get values of the right form that name nothing: the request passes
        // validation and stops at a 404 (a sandbox), or acts on a throwaway tenant or secret.
        const url = path.replace(
          /\{(\w+)\}/g,
          (_m, name: string) =>
            ({
              id: 'sbx_openapi_example',
              callId: 'call-example',
              tenant: 'openapi-example',
              name: 'OPENAPI_EXAMPLE',
              pid: '4242',
              port: '8000',
            })[name] ?? 'x',
        );
        for (const example of bodyExamples(op)) {
          const response = await h.client.raw(method.toUpperCase(), url, {
            body: JSON.stringify(example),
            headers: { 'content-type': 'application/json' },
          });
          const text = await response.text();
          expect(response.status, `${method} ${path} ${JSON.stringify(example)}: ${text}`).toBeLessThan(500);
          expect(text, `${method} ${path} ${JSON.stringify(example)}`).not.toMatch(/"code":"input\./);
          checked.push(`${method} ${path}`);
        }
      }
    }
    // Volumes the examples made hold a disk on the host: removed here, not left to the Redis cleanup.
    for (const name of ['pip-cache', 'dataset']) expect((await h.client.raw('DELETE', `/v1/volumes/${name}`)).status).toBe(200);
    // The examples the schemas carry: leases, checkpoints, calls, keys, quotas, secrets, volumes, snapshots, signals.
    expect(new Set(checked)).toEqual(
      new Set([
        'post /v1/volumes',
        'post /v1/sandboxes',
        'post /v1/sandboxes/{id}/checkpoints',
        'post /v1/sandboxes/{id}/calls',
        'post /v1/api-keys',
        'put /v1/tenants/{tenant}/quota',
        'put /v1/secrets/{name}',
        'post /v1/sandboxes/{id}/snapshots',
        'post /v1/sandboxes/{id}/sessions',
        'post /v1/sandboxes/{id}/sessions/{sessionId}/exec',
        'post /v1/snapshots/{id}/fork',
        'post /v1/sandboxes/{id}/terminals',
        'post /v1/sandboxes/{id}/terminals/{terminalId}/input',
        'post /v1/sandboxes/{id}/terminals/{terminalId}/url',
        'post /v1/sandboxes/{id}/calls/{callId}/stdin',
        'post /v1/sandboxes/{id}/processes/{pid}/signal',
        'post /v1/sandboxes/{id}/ports/{port}/url',
      ]),
    );
  });

  it('a schema that refuses an input refuses it at the route: the document and validation are one', async () => {
    const doc = await openapi();
    const createSchema = JSON.stringify(doc.paths['/v1/sandboxes']!.post!.requestBody);
    expect(createSchema).toContain('"additionalProperties":false');
    const refused = await h.client.raw('POST', '/v1/sandboxes', {
      body: JSON.stringify({ privileged: true }),
      headers: { 'content-type': 'application/json' },
    });
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain('input.invalid');
  });

  it('the interactive docs are served at /docs without an API key', async () => {
    const response = await fetch(`${h.url}/docs/`, { redirect: 'follow' });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/html');
    expect(await response.text()).toMatch(/swagger/i);
  });
});
