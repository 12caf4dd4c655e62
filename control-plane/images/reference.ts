/**
 * Image references (`[registry/]repository[:tag][@sha256:…]`, Docker's grammar) checked before
 * anything else happens to a lease or a build. Pure; unit-tested in `reference.test.ts`.
 */
import { AppError } from '../../contract/errors.js';

/** Longest accepted reference, characters (Docker's own limit on a name is 255). */
export const MAX_IMAGE_REF_CHARS = 255;

/** A reference taken apart. */
export interface ImageRef {
  /** The registry named in the reference (`host[:port]`, lower case), or null: Docker Hub implied (`docker.io`). */
  registry: string | null;
  repository: string;
  tag: string | null;
  digest: string | null;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * Parses `ref`. Throws `image.invalid_reference` (400, `details.field: 'image'`) when it is
 * empty, longer than 255 characters, or not a Docker reference.
 */
export function parseImageRef(ref: string): ImageRef {
  const invalid = (why: string): AppError =>
    new AppError('image.invalid_reference', `image reference ${JSON.stringify(ref.slice(0, 300))} is invalid: ${why}`, {
      details: { field: 'image', reason: why },
    });
  if (ref.length === 0) throw invalid('it is empty');
  if (ref.length > MAX_IMAGE_REF_CHARS) throw invalid(`it is longer than ${MAX_IMAGE_REF_CHARS} characters`);
  let rest = ref;
  let digest: string | null = null;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid('the digest is not sha256:<64 hex>');
  }
  let tag: string | null = null;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid('the tag holds characters other than letters, digits, _ . -, or is over 128');
  }
  const parts = rest.split('/');
  let registry: string | null = null;
  const first = parts[0] ?? '';
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    if (!DOMAIN.test(first)) throw invalid(`the registry ${first} is not a host[:port]`);
    registry = first.toLowerCase();
    parts.shift();
  }
  if (parts.length === 0 || !parts.every((p) => COMPONENT.test(p)))
    throw invalid('the repository must be lower-case path components of letters, digits and single separators');
  return { registry, repository: parts.join('/'), tag, digest };
}

/**
 * Refuses a reference whose registry is not on `allowlist` (`host[:port]`, `SBX_IMAGE_REGISTRIES`).
 * A reference without a registry names Docker Hub (`docker.io`). Throws
 * `image.registry_not_allowed` (400). Returns whether the registry may be pulled from.
 */
export function checkRegistry(ref: ImageRef, allowlist: readonly string[]): { pullable: boolean } {
  const registry = ref.registry ?? 'docker.io';
  const allowed = allowlist.map((r) => r.toLowerCase()).includes(registry);
  // An image without a registry may still be one built or loaded on this engine: it is only never pulled.
  if (ref.registry === null) return { pullable: allowed };
  if (!allowed)
    throw new AppError('image.registry_not_allowed', `registry ${registry} is not on this installation's image registry allowlist`, {
      details: { field: 'image', registry, allowed: [...allowlist] },
    });
  return { pullable: true };
}
