import { getEventListeners } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { drainedOrAborted } from './sse.js';

describe('waiting for a slow SSE client', () => {
  it('leaves no listener on the request signal or the stream after any number of drains, and ends at once on abort', async () => {
    const stream = new PassThrough({ highWaterMark: 4 });
    const request = new AbortController();
    for (let i = 0; i < 25; i += 1) {
      expect(stream.write('0123456789')).toBe(false);
      const waited = drainedOrAborted(stream, request.signal);
      stream.read();
      await waited;
    }
    expect(getEventListeners(request.signal, 'abort')).toHaveLength(0);
    expect(stream.listenerCount('drain')).toBe(0);

    stream.write('0123456789');
    const waited = drainedOrAborted(stream, request.signal);
    request.abort();
    await waited;
    expect(stream.listenerCount('drain')).toBe(0);
    await drainedOrAborted(stream, request.signal); // already aborted: no wait
  });

  it('ends when the stream closes before draining, and rejects with its error, leaving no listener either way', async () => {
    const request = new AbortController();
    const closing = new PassThrough({ highWaterMark: 4 });
    closing.write('0123456789');
    const waited = drainedOrAborted(closing, request.signal);
    closing.destroy();
    await waited;
    await drainedOrAborted(closing, request.signal); // closed already: no wait
    const failing = new PassThrough({ highWaterMark: 4 });
    failing.write('0123456789');
    const failed = drainedOrAborted(failing, request.signal);
    failing.destroy(new Error('socket reset'));
    await expect(failed).rejects.toThrow('socket reset');
    expect(getEventListeners(request.signal, 'abort')).toHaveLength(0);
    expect(closing.listenerCount('drain') + closing.listenerCount('close') + failing.listenerCount('drain')).toBe(0);
  });
});
