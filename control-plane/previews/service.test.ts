import { describe, expect, it } from 'vitest';
import { parseHostLabel, portAllowed } from './service.js';

describe('portAllowed', () => {
  it('matches single ports and inclusive ranges; nothing is allowed by an empty list', () => {
    const rules = [8000, { from: 3000, to: 3999 }];
    for (const port of [8000, 3000, 3500, 3999]) expect(portAllowed(rules, port), String(port)).toBe(true);
    for (const port of [7999, 8001, 2999, 4000, 22]) expect(portAllowed(rules, port), String(port)).toBe(false);
    expect(portAllowed([], 8000)).toBe(false);
  });
});

describe('parseHostLabel', () => {
  it('reads <port>-<sandbox id> and refuses anything else', () => {
    expect(parseHostLabel('8000-sbx_abc-1')).toEqual({ port: 8000, sandboxId: 'sbx_abc-1' });
    for (const label of ['0-sbx_a', '65536-sbx_a', '8000', '-sbx_a', 'x-sbx_a', '8000-', '8000-a.b', '123456-sbx_a'])
      expect(parseHostLabel(label), label).toBeNull();
  });
});
