/**
 * Signed URLs: a token that lets a browser reach one thing of one sandbox — a port preview, a
 * terminal's WebSocket — until it expires, without an API key. One signing scheme for all of
 * them; pure (the clock is passed in), unit-tested in `signed-urls.test.ts`.
 *
 * Token: `<expiry, unix seconds>.<key id>.<base64url of the first 16 bytes of
 * HMAC-SHA256(key, "sbx-<purpose>-v1|" + sandbox id + "|" + subject + "|" + expiry + "|" + key id)>`.
 * The sandbox id and the subject (a port, a terminal id) are named by the URL beside the token
 * and covered by the MAC, so a token opens only what it was minted for, and fits one path
 * segment. The purpose keeps a token of one kind from opening another. The key id names who
 * minted it, for the logs.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { AppError, type ErrorCode } from '../../contract/errors.js';
import type { Principal } from './auth.js';

/** What a signed URL opens. */
export type SignedUrlPurpose = 'preview' | 'terminal' | 'e2b-envd';

/** What a valid token grants, and who minted it. */
export interface SignedGrant {
  sandboxId: string;
  /** What of the sandbox: a port (`"8000"`), a terminal id. */
  subject: string;
  expiresAt: Date;
  /** Id of the API key that minted it. */
  keyId: string;
}

const TOKEN = /^(\d{1,12})\.([A-Za-z0-9_-]{1,40})\.([A-Za-z0-9_-]{22})$/;

const REFUSALS: Record<SignedUrlPurpose, { invalid: ErrorCode; expired: ErrorCode; what: string }> = {
  preview: { invalid: 'preview.url_invalid', expired: 'preview.url_expired', what: 'preview URL' },
  terminal: { invalid: 'terminal.url_invalid', expired: 'terminal.url_expired', what: 'terminal URL' },
  'e2b-envd': { invalid: 'envd.token_invalid', expired: 'envd.token_expired', what: 'E2B access token' },
};

function mac(key: Buffer, purpose: SignedUrlPurpose, sandboxId: string, subject: string, expiry: number, keyId: string): Buffer {
  return createHmac('sha256', key).update(`sbx-${purpose}-v1|${sandboxId}|${subject}|${expiry}|${keyId}`).digest().subarray(0, 16);
}

/** Signs `grant` for `purpose` into a token (URL-safe: digits, base64url and `.`; under 80 characters). */
export function signGrant(key: Buffer, purpose: SignedUrlPurpose, grant: SignedGrant): string {
  const expiry = Math.floor(grant.expiresAt.getTime() / 1000);
  const sig = mac(key, purpose, grant.sandboxId, grant.subject, expiry, grant.keyId).toString('base64url');
  return `${expiry}.${grant.keyId}.${sig}`;
}

/**
 * The grant of `token` for `subject` of `sandboxId` at time `now`. Throws AppError
 * `<purpose>.url_invalid` (401) for anything malformed or not signed with `key` for this
 * purpose, sandbox and subject, `<purpose>.url_expired` (401) once `now` is at or past its
 * expiry (checked after the signature, so an expiry cannot be forged longer).
 */
export function verifyGrant(
  key: Buffer,
  purpose: SignedUrlPurpose,
  sandboxId: string,
  subject: string,
  token: string,
  now: Date,
): SignedGrant {
  const refusal = REFUSALS[purpose];
  const invalid = (): AppError =>
    new AppError(refusal.invalid, `the ${refusal.what} is not valid (malformed, or not signed by this installation for this sandbox)`);
  const m = TOKEN.exec(token);
  if (!m) throw invalid();
  const expiry = Number(m[1]);
  const keyId = m[2]!;
  const given = Buffer.from(m[3]!, 'base64url');
  const expected = mac(key, purpose, sandboxId, subject, expiry, keyId);
  // One spelling per token: base64url's last character has bits the decoder ignores.
  if (given.toString('base64url') !== m[3] || given.length !== expected.length || !timingSafeEqual(given, expected)) throw invalid();
  const expiresAt = new Date(expiry * 1000);
  if (now.getTime() >= expiresAt.getTime())
    throw new AppError(refusal.expired, `the ${refusal.what} has expired; ask for a new one`, {
      details: { expiresAt: expiresAt.toISOString() },
    });
  return { sandboxId, subject, expiresAt, keyId };
}

/**
 * The key signed URLs are signed with: the installation's own (`SBX_PREVIEW_KEY`, or
 * `<data dir>/preview-key` made by main.ts), else one derived from the secrets key (HKDF-SHA256,
 * info `sbx preview urls`), so a control plane embedded without one still signs consistently.
 */
export function urlSigningKey(own: Buffer | undefined, secretsKey: Buffer): Buffer {
  return own ?? Buffer.from(hkdfSync('sha256', secretsKey, Buffer.alloc(0), 'sbx preview urls', 32));
}

/**
 * Who looks the lease of a signed URL up: the signature already bound the URL to one sandbox id
 * (minted by a key that could see it), so the lookup is not scoped to a tenant.
 */
export const SIGNED_URL_PRINCIPAL: Principal = Object.freeze({ keyId: 'signed-url', role: 'admin', tenant: '' });
