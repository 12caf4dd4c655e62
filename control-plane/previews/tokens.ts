/**
 * Signed preview URLs: a token that lets a browser reach one port of one sandbox until it
 * expires, without an API key. Pure (the clock is passed in), unit-tested in `tokens.test.ts`.
 *
 * Token: `<port>.<expiry, unix seconds>.<key id>.<base64url of the first 16 bytes of
 * HMAC-SHA256(key, "sbx-preview-v1|" + sandbox id + "|" + port + "|" + expiry + "|" + key id)>`.
 * The sandbox id is not in the token but in the URL beside it (`/v1/previews/<id>/<token>/`, or
 * the preview host's name) and covered by the MAC, so the token fits one path segment (at most
 * 100 characters, the router's limit). The key id names who minted it, for the preview log.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { AppError } from '../../contract/errors.js';

/** What a valid token grants, and who minted it. */
export interface PreviewGrant {
  sandboxId: string;
  port: number;
  expiresAt: Date;
  /** Id of the API key that minted it. */
  keyId: string;
}

const TOKEN = /^(\d{1,5})\.(\d{1,12})\.([A-Za-z0-9_-]{1,40})\.([A-Za-z0-9_-]{22})$/;

function mac(key: Buffer, sandboxId: string, port: number, expiry: number, keyId: string): Buffer {
  return createHmac('sha256', key).update(`sbx-preview-v1|${sandboxId}|${port}|${expiry}|${keyId}`).digest().subarray(0, 16);
}

/** Signs `grant` into a token (URL-safe: digits, base64url and `.`; under 80 characters). */
export function signPreviewToken(key: Buffer, grant: PreviewGrant): string {
  const expiry = Math.floor(grant.expiresAt.getTime() / 1000);
  const sig = mac(key, grant.sandboxId, grant.port, expiry, grant.keyId).toString('base64url');
  return `${grant.port}.${expiry}.${grant.keyId}.${sig}`;
}

/**
 * The grant of `token` for `sandboxId` at time `now`. Throws AppError `preview.url_invalid`
 * (401) for anything malformed or not signed with `key` for this sandbox, `preview.url_expired`
 * (401) once `now` is at or past its expiry (checked after the signature, so an expiry cannot be
 * forged longer).
 */
export function verifyPreviewToken(key: Buffer, sandboxId: string, token: string, now: Date): PreviewGrant {
  const m = TOKEN.exec(token);
  if (!m) throw invalid();
  const port = Number(m[1]);
  const expiry = Number(m[2]);
  const keyId = m[3]!;
  const given = Buffer.from(m[4]!, 'base64url');
  const expected = mac(key, sandboxId, port, expiry, keyId);
  if (given.length !== expected.length || !timingSafeEqual(given, expected) || port < 1 || port > 65535) throw invalid();
  const expiresAt = new Date(expiry * 1000);
  if (now.getTime() >= expiresAt.getTime())
    throw new AppError('preview.url_expired', 'the preview URL has expired; ask for a new one', {
      details: { expiresAt: expiresAt.toISOString() },
    });
  return { sandboxId, port, expiresAt, keyId };
}

function invalid(): AppError {
  return new AppError(
    'preview.url_invalid',
    'the preview URL is not valid (malformed, or not signed by this installation for this sandbox)',
  );
}

/**
 * The key preview URLs are signed with: the installation's own (`SBX_PREVIEW_KEY`, or
 * `<data dir>/preview-key` made by main.ts), else one derived from the secrets key (HKDF-SHA256,
 * info `sbx preview urls`), so a control plane embedded without one still signs consistently.
 */
export function previewSigningKey(own: Buffer | undefined, secretsKey: Buffer): Buffer {
  return own ?? Buffer.from(hkdfSync('sha256', secretsKey, Buffer.alloc(0), 'sbx preview urls', 32));
}
