import { describe, expect, it } from 'vitest';
import { attributedCall, attributionKey, callCredential } from './attribution.js';

const key = attributionKey(Buffer.alloc(32, 7));
const basic = (text: string): string => `Basic ${Buffer.from(text).toString('base64')}`;

describe('egress call attribution', () => {
  it("a call's credential, sent as Basic proxy credentials, names that call in its lease", () => {
    const credential = callCredential(key, 'sbx_a', 'call_1');
    expect(credential).toMatch(/^call_1:[A-Za-z0-9_-]{32}$/);
    expect(attributedCall(key, 'sbx_a', basic(credential))).toBe('call_1');
    expect(attributedCall(key, 'sbx_a', basic(credential).replace('Basic', 'basic'))).toBe('call_1');
  });

  it('names no call for another lease, another call id, a changed token, another key or no header', () => {
    const credential = callCredential(key, 'sbx_a', 'call_1');
    const token = credential.split(':')[1]!;
    expect(attributedCall(key, 'sbx_b', basic(credential))).toBeNull();
    expect(attributedCall(key, 'sbx_a', basic(`call_2:${token}`))).toBeNull();
    expect(attributedCall(key, 'sbx_a', basic(`call_1:${token.slice(0, -1)}x`))).toBeNull();
    expect(attributedCall(key, 'sbx_a', basic(`call_1:${token.slice(0, -1)}`))).toBeNull();
    expect(attributedCall(attributionKey(Buffer.alloc(32, 8)), 'sbx_a', basic(credential))).toBeNull();
    expect(attributedCall(key, 'sbx_a', undefined)).toBeNull();
  });

  it('malformed headers name nothing and never throw', () => {
    for (const header of [
      '',
      'Bearer abc',
      'Basic',
      'Basic !!!',
      basic('no-colon'),
      basic(':token'),
      basic('bad id:x'),
      `Basic ${'A'.repeat(5000)}`,
    ])
      expect(attributedCall(key, 'sbx_a', header)).toBeNull();
  });
});
