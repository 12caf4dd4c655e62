/**
 * The SDK's one error class. Every failure the platform reports — an HTTP error body, or a tool
 * call that ended without succeeding — arrives as an `SbxError` carrying the platform's stable
 * `code` (`domain.reason`, docs/errors.md) and its `retryability`. Branch on `code`, never on
 * `message`.
 */
import { ErrorBody, type ErrorCode, type ErrorInfo, type Retryability } from '../contract/errors.js';
import type { ToolResult } from '../contract/objects.js';

export class SbxError extends Error {
  /** The catalogue code, e.g. `lease.expired`, `files.not_found`, `execution.timeout`. */
  readonly code: ErrorCode;
  /** The part of `code` before the dot. */
  readonly domain: string;
  /** `no`, `after_fix`, `safe` (retry as is) or `reconcile_first` (read the state/receipt before retrying). */
  readonly retryability: Retryability;
  readonly details: Record<string, unknown> | undefined;
  /** HTTP status of the answer that carried the error; null when it came from a call's result or no answer came. */
  readonly status: number | null;
  /** The call's result when a tool call ended with this error (its receipt says what took effect). */
  readonly result: ToolResult | null;
  /** The error in its wire form `{code, domain, message, retryability, details}`, as the platform sent it. */
  readonly info: ErrorInfo;

  constructor(info: ErrorInfo, options: { status?: number | null; result?: ToolResult | null; cause?: unknown } = {}) {
    super(`${info.code}: ${info.message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SbxError';
    this.code = info.code;
    this.domain = info.domain;
    this.retryability = info.retryability;
    this.details = info.details;
    this.status = options.status ?? null;
    this.result = options.result ?? null;
    this.info = info;
  }
}

/**
 * The error of a non-2xx answer: its `{error}` body when it has one, else `internal.unexpected`
 * naming the status (e.g. a proxy's HTML page).
 */
export async function errorOfResponse(response: Response): Promise<SbxError> {
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const parsed = ErrorBody.safeParse(body);
  if (parsed.success) return new SbxError(parsed.data.error, { status: response.status });
  return new SbxError(
    { code: 'internal.unexpected', domain: 'internal', retryability: 'safe', message: `HTTP ${response.status}: ${text.slice(0, 200)}` },
    { status: response.status },
  );
}
