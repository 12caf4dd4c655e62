/**
 * The console's API client: every request carries the admin key, every answer is parsed with
 * zod before a page sees it, and every error answer becomes an `ApiError` with the platform's
 * `code` (pages branch on codes, never on messages).
 */
import * as z from 'zod/mini';

// The answers are parsed with zod/mini and schemas of the fields the console shows (extra fields
// pass): the contract's schemas are built on zod's full API, which cannot be tree-shaken and
// would make the page's bundle half a megabyte.

/** The `{error}` body of every error answer. */
const ErrorBody = z.object({
  error: z.object({ code: z.string(), message: z.string(), details: z.optional(z.record(z.string(), z.unknown())) }),
});

/** A lease as the console shows it (the wire contract's `Lease`, contract/objects.ts). */
export const Lease = z.object({
  id: z.string(),
  status: z.string(),
  createdAt: z.string(),
  expiresAt: z.string(),
  policy: z.object({ name: z.string(), version: z.number(), digest: z.string() }),
  labels: z.record(z.string(), z.string()),
  tenant: z.string(),
});
export type Lease = z.infer<typeof Lease>;

/** One connection of a sandbox's egress log (the contract's `EgressEvent`). */
export const EgressEvent = z.object({
  at: z.string(),
  host: z.string(),
  port: z.number(),
  method: z.string(),
  decision: z.enum(['allowed', 'denied']),
  rule: z.string(),
  address: z.nullable(z.string()),
  bytesOut: z.number(),
  bytesIn: z.number(),
});
export type EgressEvent = z.infer<typeof EgressEvent>;

/** One audit entry (control-plane/audit/schema.ts `AuditEntry`). */
export const AuditEntry = z.object({
  id: z.string(),
  at: z.string(),
  actor: z.union([z.literal('system'), z.object({ keyId: z.string(), role: z.string(), tenant: z.string() })]),
  action: z.string(),
  target: z.string(),
  beforeDigest: z.nullable(z.string()),
  afterDigest: z.nullable(z.string()),
  details: z.record(z.string(), z.unknown()),
});
export type AuditEntry = z.infer<typeof AuditEntry>;

/** One version of a policy as the admin routes return it; the document itself is shown as text, not interpreted. */
export const PolicyVersionView = z.object({
  name: z.string(),
  version: z.number(),
  digest: z.string(),
  createdAt: z.string(),
  createdBy: z.string(),
  policy: z.record(z.string(), z.unknown()),
});
export type PolicyVersionView = z.infer<typeof PolicyVersionView>;

/** `GET /v1/policies`. */
export const PolicyList = z.object({ policies: z.array(PolicyVersionView) });

/** `GET /v1/policies/:name/versions`: the head (latest, tombstone) and every version, oldest first. */
export const PolicyHistory = z.object({
  name: z.string(),
  latest: z.number(),
  deletedAt: z.nullable(z.string()),
  versions: z.array(PolicyVersionView),
});
export type PolicyHistory = z.infer<typeof PolicyHistory>;

/** `details` of a `400 policy.invalid`: every problem with its path in the document. */
export const PolicyIssues = z.object({ issues: z.array(z.object({ path: z.string(), message: z.string() })) });

/** A secret's metadata: what the API shows of a secret (it never returns a value). */
export const SecretMetadata = z.object({
  name: z.string(),
  version: z.number(),
  createdAt: z.string(),
  updatedAt: z.string(),
  updatedBy: z.string(),
  sizeBytes: z.number(),
});

export const SecretList = z.object({ secrets: z.array(SecretMetadata) });
export const SandboxList = z.object({ sandboxes: z.array(Lease) });
export const EgressLog = z.object({ events: z.array(EgressEvent), dropped: z.object({ allowed: z.number(), denied: z.number() }) });
export const AuditPage = z.object({ entries: z.array(AuditEntry), nextCursor: z.nullable(z.string()) });

/** An error answer of the API (or a network failure, `code` `console.unreachable`). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** Talks to the control plane that served the page, with one admin key. */
export class Api {
  /**
   * @param key the admin API key, sent as `Authorization: Bearer`
   * @param onUnauthorized called on any 401 (the key was revoked or mistyped): the console signs out
   */
  constructor(
    private readonly key: string,
    private readonly onUnauthorized: (error: ApiError) => void = () => undefined,
  ) {}

  /** `method path` with an optional JSON body; the answer parsed with `schema`. Throws ApiError. */
  async json<T extends z.ZodMiniType>(method: string, path: string, schema: T, body?: unknown): Promise<z.infer<T>> {
    const response = await this.send(method, path, body);
    const parsed = schema.safeParse(await response.json());
    if (!parsed.success)
      throw new ApiError(
        response.status,
        'console.unexpected_answer',
        `unexpected answer from ${method} ${path}: ${parsed.error.issues[0]?.message ?? ''}`,
      );
    return parsed.data;
  }

  /** `method path` whose answer body does not matter (e.g. a 204). Throws ApiError. */
  async call(method: string, path: string, body?: unknown): Promise<void> {
    await this.send(method, path, body);
  }

  /**
   * `GET path` of a Server-Sent Events stream: `onData` gets each event's `data:` text as it
   * arrives; resolves when the server ends the stream. Throws ApiError.
   */
  async events(path: string, onData: (data: string) => void): Promise<void> {
    const response = await this.send('GET', path, undefined);
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffered += value;
      const blocks = buffered.split('\n\n');
      buffered = blocks.pop() ?? '';
      for (const block of blocks) for (const line of block.split('\n')) if (line.startsWith('data:')) onData(line.slice(5).trim());
    }
  }

  private async send(method: string, path: string, body: unknown): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    } catch (err) {
      throw new ApiError(0, 'console.unreachable', `the control plane did not answer: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (response.ok) return response;
    const error = ErrorBody.safeParse(await response.json().catch(() => null));
    const failure = error.success
      ? new ApiError(response.status, error.data.error.code, error.data.error.message, error.data.error.details ?? {})
      : new ApiError(response.status, 'console.unexpected_answer', `${method} ${path} answered ${response.status}`);
    if (response.status === 401) this.onUnauthorized(failure);
    throw failure;
  }
}

/** A short line for an error: `code: message`. */
export function describeError(err: unknown): string {
  return err instanceof ApiError ? `${err.code}: ${err.message}` : err instanceof Error ? err.message : String(err);
}
