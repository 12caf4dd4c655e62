import { describe, expect, it } from 'vitest';
import { parseSize, parseVolumeSpec } from './volumes.js';

describe('sbx volume arguments', () => {
  it('sizes: bytes or powers of 1024', () => {
    expect(parseSize('1048576')).toBe(1048576);
    expect(parseSize('512M')).toBe(512 * 1024 ** 2);
    expect(parseSize('1G')).toBe(1024 ** 3);
    expect(parseSize('1GiB')).toBe(1024 ** 3);
    expect(parseSize('1.5g')).toBe(1.5 * 1024 ** 3);
    for (const bad of ['', '0', '-1G', '1X', 'G', '1.5', '1e9', '99999999T']) expect(() => parseSize(bad)).toThrow();
  });

  it('--volume NAME:PATH[:ro|:rw]', () => {
    expect(parseVolumeSpec('cache:/cache')).toEqual({ name: 'cache', path: '/cache' });
    expect(parseVolumeSpec('data:/data:ro')).toEqual({ name: 'data', path: '/data', readOnly: true });
    expect(parseVolumeSpec('data:/data:rw')).toEqual({ name: 'data', path: '/data' });
    for (const bad of ['cache', 'cache:', ':/x', 'a:/x:rx', 'a:/x:ro:1']) expect(() => parseVolumeSpec(bad)).toThrow();
  });
});
