/**
 * Request validation and the OpenAPI document, from one source: each route declares its zod
 * schemas in `schema:` (`body`, `querystring`, `params`, `headers`); the validator compiler
 * below parses requests with them (the same `parseInput`, so failures are `400 input.invalid`
 * naming each field as `body.x`, `query.x`, `params.x`, `headers.x`), and `@fastify/swagger`
 * turns the same objects into JSON Schema for `GET /openapi.json` (OpenAPI 3.1) and the
 * interactive docs at `/docs` (`@fastify/swagger-ui`).
 *
 * Header schemas must be `.loose()`: what a validator returns replaces the part, and a header
 * schema names only the headers it checks.
 */
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { z, type ZodType } from 'zod';
import { parseInput } from './errors.js';

/** Routes of the docs, public like `/healthz` (`/docs/*` covers the UI's assets). */
export const DOCS_ROUTES = ['/openapi.json', '/docs', '/docs/*'] as const;

/** fastify's name of a request part → the prefix of issue paths (`query.limit`, not `querystring.limit`). */
const PART_NAMES: Record<string, string> = { body: 'body', querystring: 'query', params: 'params', headers: 'headers' };

/** Schemas that document a request part whose handler validates it itself (see `validatedByHandler`). */
const handlerValidated = z.registry();

/**
 * Marks `schema` as documentation only: the validator passes the part through untouched, for a
 * handler that validates it with its own error (e.g. `policy.invalid` listing every issue).
 * Returns `schema`, typed as what the handler receives: unknown input.
 */
export function validatedByHandler(schema: ZodType): z.ZodUnknown {
  handlerValidated.add(schema, {});
  return schema as unknown as z.ZodUnknown;
}

/**
 * Validates every route's `schema:` parts with their zod schemas (`parseInput`): the parsed
 * value replaces the part, a failure is `400 input.invalid`. Set on the root before routes are
 * registered (domain plugins inherit it).
 */
export function installZodValidation(app: FastifyInstance): void {
  app.setValidatorCompiler(({ schema, httpPart }) => (data: unknown) => {
    if (handlerValidated.has(schema as ZodType)) return { value: data };
    const part = PART_NAMES[httpPart ?? 'body'] ?? 'body';
    // fastify hands an absent body over as null; routes whose fields are all optional accept none.
    const input = part === 'body' && data === null ? {} : data;
    try {
      return { value: parseInput(schema as ZodType, input, part) };
    } catch (error) {
      return { error: error as Error };
    }
  });
  // The validator cannot tell an absent body from a body of JSON `null` (fastify hands it both as
  // null, above); this hook still can (an absent body is undefined here): a `null` that was sent is
  // checked as it is, refused like `[]` or `"text"`.
  app.addHook('preValidation', async (request) => {
    const schema = request.routeOptions.schema?.body as ZodType | undefined;
    if (request.body === null && schema !== undefined && !handlerValidated.has(schema)) parseInput(schema, null, 'body');
  });
}

/**
 * Registers the OpenAPI document (`GET /openapi.json`) and the docs UI (`/docs`). Call before
 * registering routes: `@fastify/swagger` collects them as they are added.
 */
export async function installOpenApi(app: FastifyInstance, info: { version: string }): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'sbx',
        version: info.version,
        description:
          'Ephemeral container sandboxes for coding agents and CI jobs. Errors are `{"error": {code, domain, message, retryability, details}}` with a stable `domain.reason` code (docs/errors.md).',
      },
      components: {
        securitySchemes: { apiKey: { type: 'http', scheme: 'bearer', description: 'An sbx API key (`sbx_…`, or the bootstrap key).' } },
      },
      security: [{ apiKey: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { summary: 'This OpenAPI 3.1 document', tags: ['meta'], security: [] } }, async () => app.swagger());
}
