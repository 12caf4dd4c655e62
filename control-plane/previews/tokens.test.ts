import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { signPreviewToken, verifyPreviewToken, type PreviewGrant } from './tokens.js';

const key = randomBytes(32);
const grant: PreviewGrant = {
  sandboxId: 'sbx_abc',
  port: 8000,
  expiresAt: new Date('2030-01-01T00:00:00Z'),
  keyId: 'key_0123456789abcdef0123',
};
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
  it('round-trip the grant before expiry and fit one router path segment', () => {
    const token = signPreviewToken(key, grant);
    expect(token.length).toBeLessThanOrEqual(100);
    expect(verifyPreviewToken(key, 'sbx_abc', token, before)).toEqual(grant);
  });

  it('are expired at and after the expiry second', () => {
    const token = signPreviewToken(key, grant);
    expect(codeOf(() => verifyPreviewToken(key, 'sbx_abc', token, grant.expiresAt))).toBe('preview.url_expired');
  });

  it('refuse another key, another sandbox, a changed port, expiry or key id, a changed signature and garbage', () => {
    const token = signPreviewToken(key, grant);
    expect(codeOf(() => verifyPreviewToken(randomBytes(32), 'sbx_abc', token, before))).toBe('preview.url_invalid');
    expect(codeOf(() => verifyPreviewToken(key, 'sbx_other', token, before))).toBe('preview.url_invalid');
    const [port, expiry, keyId, sig] = token.split('.') as [string, string, string, string];
    for (const forged of [
      `8001.${expiry}.${keyId}.${sig}`,
      `${port}.${Number(expiry) + 3600}.${keyId}.${sig}`,
      `${port}.${expiry}.bootstrap.${sig}`,
      `${port}.${expiry}.${keyId}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`,
    ])
      expect(
        codeOf(() => verifyPreviewToken(key, 'sbx_abc', forged, before)),
        forged,
      ).toBe('preview.url_invalid');
    for (const junk of ['', '.', 'a.b.c', 'x'.repeat(5000), `${token}.`, `0.${expiry}.${keyId}.${sig}`])
      expect(codeOf(() => verifyPreviewToken(key, 'sbx_abc', junk, before))).toBe('preview.url_invalid');
  });
});
