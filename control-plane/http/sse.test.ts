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
});
