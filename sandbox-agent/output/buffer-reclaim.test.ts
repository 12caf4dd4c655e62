/**
 * Buffer reclaim: a scavenge (V8's `gc`, minor) once every RECLAIM_EVERY_BYTES passed on, none
 * before, and nothing at all when the agent's `gc` is not exposed.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';

afterEach(() => {
  vi.unstubAllGlobals();
  vi.resetModules();
});

describe('bytesPassed', () => {
  it('scavenges once per RECLAIM_EVERY_BYTES passed on, whatever the chunk sizes', async () => {
    const gc = vi.fn();
    vi.stubGlobal('gc', gc);
    const { bytesPassed, RECLAIM_EVERY_BYTES } = await import('./buffer-reclaim.js');
    const chunk = 64 * 1024;
    for (let i = 0; i < RECLAIM_EVERY_BYTES / chunk - 1; i += 1) bytesPassed(chunk);
    expect(gc).not.toHaveBeenCalled();
    bytesPassed(chunk);
    expect(gc).toHaveBeenCalledTimes(1);
    expect(gc).toHaveBeenCalledWith({ type: 'minor' });
    bytesPassed(RECLAIM_EVERY_BYTES * 3);
    expect(gc).toHaveBeenCalledTimes(2);
  });

  it('does nothing when gc is not exposed', async () => {
    vi.stubGlobal('gc', undefined);
    const { bytesPassed, RECLAIM_EVERY_BYTES } = await import('./buffer-reclaim.js');
    expect(() => bytesPassed(RECLAIM_EVERY_BYTES * 2)).not.toThrow();
  });
});
