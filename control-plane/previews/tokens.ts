/**
 * Signed preview URLs: a token that lets a browser reach one port of one sandbox until it
 * expires, without an API key. Pure (the clock is passed in), unit-tested in `tokens.test.ts`.
 *
 * Token: `base64url(JSON claims).base64url(HMAC-SHA256(key, "sbx-preview-v1." + first part))`.
 * The claims name the sandbox, the port, the expiry (unix seconds) and who minted it (tenant
 * and key id, for the preview log); all of them are covered by the MAC.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';

const Claims = z
  .object({
    /** Sandbox id. */
    s: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
    /** Port in the sandbox. */
    p: z.number().int().min(1).max(65535),
    /** Expiry, unix seconds. */
    e: z.number().int().positive(),
    /** Tenant and key id of the API key that minted it. */
    t: z.string().max(256),
    k: z.string().max(256),
  })
  .strict();

/** What a valid token grants, and who minted it. */
export interface PreviewGrant {
  sandboxId: string;
  port: number;
  expiresAt: Date;
  tenant: string;
  keyId: string;
}

/** Largest token accepted, characters (anything longer is not one of ours). */
const MAX_TOKEN_CHARS = 1024;

function mac(key: Buffer, body: string): Buffer {
  return createHmac('sha256', key).update(`sbx-preview-v1.${body}`).digest();
}

/** Signs `grant` into a token (URL-safe: base64url and one `.`). */
export function signPreviewToken(key: Buffer, grant: PreviewGrant): string {
  const claims: z.infer<typeof Claims> = {
    s: grant.sandboxId,
    p: grant.port,
    e: Math.floor(grant.expiresAt.getTime() / 1000),
    t: grant.tenant,
    k: grant.keyId,
  };
  const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
  return `${body}.${mac(key, body).toString('base64url')}`;
}

/**
 * The grant of `token` at time `now`. Throws AppError `preview.url_invalid` (401) for anything
 * malformed or not signed with `key`, `preview.url_expired` (401) once `now` is at or past its
 * expiry (checked after the signature, so an expiry cannot be forged longer).
 */
export function verifyPreviewToken(key: Buffer, token: string, now: Date): PreviewGrant {
  const invalid = (): AppError =>
    new AppError('preview.url_invalid', 'the preview URL is not valid (malformed or not signed by this installation)');
  if (token.length > MAX_TOKEN_CHARS) throw invalid();
  const dot = token.indexOf('.');
  if (dot <= 0 || dot !== token.lastIndexOf('.')) throw invalid();
  const body = token.slice(0, dot);
  const given = Buffer.from(token.slice(dot + 1), 'base64url');
  const expected = mac(key, body);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw invalid();
  let claims: z.infer<typeof Claims>;
  try {
    claims = Claims.parse(JSON.parse(Buffer.from(body, 'base64url').toString('utf8')));
  } catch {
    throw invalid();
  }
  const expiresAt = new Date(claims.e * 1000);
  if (now.getTime() >= expiresAt.getTime())
    throw new AppError('preview.url_expired', 'the preview URL has expired; ask for a new one', {
      details: { expiresAt: expiresAt.toISOString() },
    });
  return { sandboxId: claims.s, port: claims.p, expiresAt, tenant: claims.t, keyId: claims.k };
}
