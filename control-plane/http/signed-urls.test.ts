import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signGrant, verifyGrant, type SignedGrant } from './signed-urls.js';

const key = randomBytes(32);
const grant: SignedGrant = {
  sandboxId: 'sbx_abc',
  subject: 'call_0123456789abcdef',
  expiresAt: new Date('2030-01-01T00:00:00Z'),
  keyId: 'key_0123456789abcdef0123',
};
const before = new Date('2029-12-31T23:59:59Z');

/** Asserts that `fn` throws the AppError `code`. */
const refused = (fn: () => unknown, code: string): void => expect(fn).toThrow(expect.objectContaining({ code }));

describe('signed URL grants', () => {
  it('round-trip for their purpose, sandbox and subject before expiry, in one router path segment', () => {
    const token = signGrant(key, 'terminal', grant);
    expect(token.length).toBeLessThanOrEqual(100);
    expect(verifyGrant(key, 'terminal', 'sbx_abc', grant.subject, token, before)).toEqual(grant);
  });

  it('refuse another subject, sandbox, purpose or key as invalid, and an expired one as expired', () => {
    const token = signGrant(key, 'terminal', grant);
    refused(() => verifyGrant(key, 'terminal', 'sbx_abc', 'call_other', token, before), 'terminal.url_invalid');
    refused(() => verifyGrant(key, 'terminal', 'sbx_other', grant.subject, token, before), 'terminal.url_invalid');
    refused(() => verifyGrant(key, 'preview', 'sbx_abc', grant.subject, token, before), 'preview.url_invalid');
    refused(() => verifyGrant(randomBytes(32), 'terminal', 'sbx_abc', grant.subject, token, before), 'terminal.url_invalid');
    refused(() => verifyGrant(key, 'terminal', 'sbx_abc', grant.subject, token, grant.expiresAt), 'terminal.url_expired');
    // The signature's last character carries 2 bits: its other spellings decode the same, and are refused.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const respelled = `${token.slice(0, -1)}${alphabet[alphabet.indexOf(token.at(-1)!) + 1]}`;
    expect(Buffer.from(respelled.split('.').at(-1)!, 'base64url')).toEqual(Buffer.from(token.split('.').at(-1)!, 'base64url'));
    for (const junk of ['', 'a.b.c', `${token}.`, 'x'.repeat(500), respelled])
      refused(() => verifyGrant(key, 'terminal', 'sbx_abc', grant.subject, junk, before), 'terminal.url_invalid');
  });
});
