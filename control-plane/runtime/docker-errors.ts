/** Docker errors as AppErrors, translated once here for every Docker module of the runtime. */
import { AppError } from '../../contract/errors.js';

/** `runtime.unavailable` for a Docker call `what` that failed with `err` (kept as the cause). */
export function unavailable(what: string, err: unknown): AppError {
  return new AppError('runtime.unavailable', `Docker engine: ${what} failed: ${messageOf(err)}`, { cause: err });
}

/** The HTTP status of a Docker engine error (dockerode's `statusCode`), if any. */
export function statusOf(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'statusCode' in err ? Number((err as { statusCode: unknown }).statusCode) : undefined;
}

/** The engine's own message of a Docker error (its JSON `message`), else the error's. */
export function messageOf(err: unknown): string {
  if (typeof err === 'object' && err !== null && 'json' in err) {
    const json = (err as { json?: { message?: string } }).json;
    if (json?.message) return json.message;
  }
  return err instanceof Error ? err.message : String(err);
}
