import { describe, expect, it } from 'vitest';
import { seesTenant } from './auth.js';

describe('seesTenant', () => {
  it('a user key sees only its own tenant; an admin key sees every tenant', () => {
    expect(seesTenant({ keyId: 'k', role: 'user', tenant: 'a' }, 'a')).toBe(true);
    expect(seesTenant({ keyId: 'k', role: 'user', tenant: 'a' }, 'b')).toBe(false);
    expect(seesTenant({ keyId: 'k', role: 'admin', tenant: 'a' }, 'b')).toBe(true);
  });
});
