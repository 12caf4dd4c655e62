/**
 * Content addressing: `sha256:<hex>` over the canonical JSON (RFC 8785, JSON Canonicalization
 * Scheme) of a value, so the same object always has the same digest whatever its key order.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

// canonicalize is CommonJS with `module.exports = fn` but types it as an ES default export.
const canonicalize = createRequire(import.meta.url)('canonicalize') as (input: unknown) => string | undefined;

/** RFC 8785 canonical JSON text of `value`. Throws TypeError for values JSON cannot hold. */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}

/** `sha256:<64 hex>` of the canonical JSON of `value`. */
export function digestOf(value: unknown): string {
  return `sha256:${sha256Hex(canonicalJson(value))}`;
}

/** Lower-case hex sha256 of a string (UTF-8) or bytes. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
