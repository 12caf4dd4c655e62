import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AppError, ERROR_CODES, errorInfo } from './errors.js';

const docs = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');

describe('error catalogue', () => {
  it('every code is documented in docs/errors.md, and every documented code exists', () => {
    const documented = new Set([...docs.matchAll(/^\| `([a-z_]+\.[a-z_]+)` \|/gm)].map((m) => m[1]));
    expect([...documented].sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('codes are domain.reason and carry their domain and retryability on the wire', () => {
    for (const code of Object.keys(ERROR_CODES) as Array<keyof typeof ERROR_CODES>) {
      expect(code).toMatch(/^[a-z]+\.[a-z_]+$/);
      const info = errorInfo(code, 'm');
      expect(info.domain).toBe(code.split('.')[0]);
      expect(info.retryability).toBe(ERROR_CODES[code].retryability);
    }
  });

  it('AppError maps to its catalogue status and keeps its cause', () => {
    const cause = new Error('docker said no');
    const err = new AppError('lease.expired', 'gone', { details: { id: 'x' }, cause });
    expect(err.status).toBe(410);
    expect(err.cause).toBe(cause);
    expect(err.toInfo()).toEqual({ code: 'lease.expired', domain: 'lease', message: 'gone', retryability: 'no', details: { id: 'x' } });
  });
});
