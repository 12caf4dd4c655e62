import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { open, seal, SecretFilePath, SecretName } from './secrets.js';

describe('seal / open (AES-256-GCM)', () => {
  const key = randomBytes(32);

  it('round-trips bytes, with a fresh IV each time', () => {
    const value = Buffer.from('s3cr3t value ✓');
    const a = seal(key, 'sbx-secret:TOKEN', value);
    const b = seal(key, 'sbx-secret:TOKEN', value);
    expect(a.iv).not.toBe(b.iv);
    expect(a.ciphertext).not.toBe(b.ciphertext);
    expect(open(key, 'sbx-secret:TOKEN', a).equals(value)).toBe(true);
    expect(Buffer.from(a.ciphertext, 'base64').includes(value)).toBe(false);
  });

  it('refuses another name (AAD), another key, or a flipped byte', () => {
    const sealed = seal(key, 'sbx-secret:A', Buffer.from('value'));
    expect(() => open(key, 'sbx-secret:B', sealed)).toThrow();
    expect(() => open(randomBytes(32), 'sbx-secret:A', sealed)).toThrow();
    const bytes = Buffer.from(sealed.ciphertext, 'base64');
    bytes[0]! ^= 1;
    expect(() => open(key, 'sbx-secret:A', { ...sealed, ciphertext: bytes.toString('base64') })).toThrow();
    expect(() => open(key, 'sbx-secret:A', { ...sealed, tag: '' })).toThrow();
  });

  it('refuses keys that are not 32 bytes', () => {
    expect(() => seal(randomBytes(16), 'a', Buffer.from('x'))).toThrow(RangeError);
  });
});

describe('secret names and file paths', () => {
  it('names are env-friendly and bounded', () => {
    for (const ok of ['NPM_TOKEN', 'a.b-c_1', 'x']) expect(SecretName.safeParse(ok).success).toBe(true);
    for (const bad of ['', 'a b', 'a/b', 'ü', 'x'.repeat(129), '$X']) expect(SecretName.safeParse(bad).success).toBe(false);
  });

  it('file paths lie directly in /run/secrets', () => {
    expect(SecretFilePath.safeParse('/run/secrets/npmrc').success).toBe(true);
    for (const bad of [
      '/workspace/x',
      '/run/secrets/',
      '/run/secrets/a/b',
      '/run/secrets/..',
      '/run/secrets/.',
      'run/secrets/x',
      '/run/secrets/../etc',
    ]) {
      expect(SecretFilePath.safeParse(bad).success).toBe(false);
    }
  });
});
