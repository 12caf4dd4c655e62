import { describe, expect, it } from 'vitest';
import type { InputMessage } from '../../contract/queue.js';
import { redisInput, type BlockingConnection, type StreamEntry } from './input-stream.js';

/** A stream in memory: reads block until entries after `afterId` exist or the connection closes. */
function fakeStream() {
  const entries: StreamEntry[] = [];
  const waiters: Array<() => void> = [];
  const removed: string[] = [];
  const consumed: Array<[string, number]> = [];
  let n = 0;
  const add = (value: string): void => {
    n += 1;
    entries.push([`${n}-0`, ['m', value]]);
    for (const w of waiters.splice(0)) w();
  };
  const connect = (): BlockingConnection => {
    let closed = false;
    return {
      readAfter: async (_key, afterId) => {
        const after = Number(afterId.split('-')[0]);
        for (;;) {
          if (closed) throw new Error('closed');
          const next = entries.filter(([id]) => Number(id.split('-')[0]) > after);
          if (next.length > 0) return next;
          await new Promise<void>((r) => waiters.push(r));
        }
      },
      consumed: async (key, bytes) => void consumed.push([key, bytes]),
      remove: async (...keys) => void removed.push(...keys),
      close: () => {
        closed = true;
        for (const w of waiters.splice(0)) w();
      },
    };
  };
  return { add, connect, removed, consumed };
}

describe('redisInput', () => {
  it('hands every message to the call in stream order, skips malformed entries, and deletes the stream on close', async () => {
    const stream = fakeStream();
    const got: InputMessage[] = [];
    const open = redisInput(
      stream.connect,
      (callId) => `input:${callId}`,
      (callId) => `pending:${callId}`,
    );
    stream.add(JSON.stringify({ kind: 'data', dataBase64: 'YQ==' }));
    const input = open('call_1', (m) => void got.push(m));
    stream.add('not json');
    stream.add(JSON.stringify({ kind: 'resize', cols: 10, rows: 5 }));
    stream.add(JSON.stringify({ kind: 'nope' }));
    stream.add(JSON.stringify({ kind: 'eof' }));
    await expect.poll(() => got.length).toBe(3);
    expect(got).toEqual([{ kind: 'data', dataBase64: 'YQ==' }, { kind: 'resize', cols: 10, rows: 5 }, { kind: 'eof' }]);
    await input.close();
    expect(stream.removed).toEqual(['input:call_1', 'pending:call_1']);
    stream.add(JSON.stringify({ kind: 'eof' }));
    expect(got).toHaveLength(3);
    expect(stream.consumed).toEqual([]);
  });

  it('a paced handler holds the next message until the pipe took this one, then gives its bytes back; close does not wait for a write that never ends', async () => {
    const stream = fakeStream();
    const got: string[] = [];
    const writes: Array<() => void> = [];
    const open = redisInput(
      stream.connect,
      (callId) => `input:${callId}`,
      (callId) => `pending:${callId}`,
    );
    const input = open('call_2', (m) => {
      got.push(m.kind === 'data' ? Buffer.from(m.dataBase64, 'base64').toString() : m.kind);
      return new Promise<void>((resolve) => writes.push(resolve));
    });
    stream.add(JSON.stringify({ kind: 'data', dataBase64: Buffer.from('abc').toString('base64') }));
    stream.add(JSON.stringify({ kind: 'data', dataBase64: Buffer.from('de').toString('base64') }));
    await expect.poll(() => got).toEqual(['abc']);
    expect(stream.consumed).toEqual([]);
    writes[0]!();
    await expect.poll(() => got).toEqual(['abc', 'de']);
    expect(stream.consumed).toEqual([['pending:call_2', 3]]);
    // The second write never completes (the process stopped reading): close still ends.
    await input.close();
    expect(stream.consumed).toEqual([['pending:call_2', 3]]);
    expect(stream.removed).toEqual(['input:call_2', 'pending:call_2']);
  });
});
