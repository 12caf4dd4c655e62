import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { signPreviewToken, verifyPreviewToken, type PreviewGrant } from './tokens.js';

const key = randomBytes(32);
const grant: PreviewGrant = { sandboxId: 'sbx_abc', port: 8000, expiresAt: new Date('2030-01-01T00:00:00Z'), tenant: 't1', keyId: 'key_1' };
const before = new Date('2029-12-31T23:59:59Z');

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return err instanceof AppError ? err.code : 'not an AppError';
  }
  return 'no error';
}

describe('preview tokens', () => {
  it('round-trip the grant before expiry', () => {
    expect(verifyPreviewToken(key, signPreviewToken(key, grant), before)).toEqual(grant);
  });

  it('are expired at and after the expiry second', () => {
    const token = signPreviewToken(key, grant);
    expect(codeOf(() => verifyPreviewToken(key, token, grant.expiresAt))).toBe('preview.url_expired');
  });

  it('refuse another key, a changed claim, a changed signature and garbage', () => {
    const token = signPreviewToken(key, grant);
    expect(codeOf(() => verifyPreviewToken(randomBytes(32), token, before))).toBe('preview.url_invalid');
    const [body, sig] = token.split('.') as [string, string];
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString()) as Record<string, unknown>;
    for (const change of [{ p: 8001 }, { s: 'sbx_other' }, { e: (claims.e as number) + 3600 }]) {
      const forged = Buffer.from(JSON.stringify({ ...claims, ...change })).toString('base64url');
      expect(codeOf(() => verifyPreviewToken(key, `${forged}.${sig}`, before))).toBe('preview.url_invalid');
    }
    const flipped = `${body}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`;
    expect(codeOf(() => verifyPreviewToken(key, flipped, before))).toBe('preview.url_invalid');
    for (const junk of ['', '.', 'a.b.c', 'x'.repeat(5000), `${body}.`, `.${sig}`])
      expect(codeOf(() => verifyPreviewToken(key, junk, before))).toBe('preview.url_invalid');
  });
});
