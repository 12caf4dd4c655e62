/**
 * Signed preview URLs: a token that lets a browser reach one port of one sandbox until it
 * expires, without an API key — the signing of `http/signed-urls.ts` with the port as subject.
 * Pure (the clock is passed in), unit-tested in `tokens.test.ts`.
 *
 * Token: `<port>.<signed grant>` (`http/signed-urls.ts`: expiry, key id, MAC over sandbox, port,
 * expiry and key id). The sandbox id is not in the token but in the URL beside it
 * (`/v1/previews/<id>/<token>/`, or the preview host's name), so the token fits one path segment
 * (at most 100 characters, the router's limit).
 */
import { AppError } from '../../contract/errors.js';
import { signGrant, verifyGrant } from '../http/signed-urls.js';

/** What a valid token grants, and who minted it. */
export interface PreviewGrant {
  sandboxId: string;
  port: number;
  expiresAt: Date;
  /** Id of the API key that minted it. */
  keyId: string;
}

/** Signs `grant` into a token (URL-safe: digits, base64url and `.`; under 80 characters). */
export function signPreviewToken(key: Buffer, grant: PreviewGrant): string {
  return `${grant.port}.${signGrant(key, 'preview', { ...grant, subject: String(grant.port) })}`;
}

/**
 * The grant of `token` for `sandboxId` at time `now`. Throws AppError `preview.url_invalid`
 * (401) for anything malformed or not signed with `key` for this sandbox, `preview.url_expired`
 * (401) once `now` is at or past its expiry.
 */
export function verifyPreviewToken(key: Buffer, sandboxId: string, token: string, now: Date): PreviewGrant {
  const m = /^(\d{1,5})\.(.*)$/s.exec(token);
  const port = Number(m?.[1] ?? 0);
  if (!m || port < 1 || port > 65535)
    throw new AppError(
      'preview.url_invalid',
      'the preview URL is not valid (malformed, or not signed by this installation for this sandbox)',
    );
  const { expiresAt, keyId } = verifyGrant(key, 'preview', sandboxId, m[1]!, m[2]!, now);
  return { sandboxId, port, expiresAt, keyId };
}
