import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { OutputStream } from '../../contract/events.js';
import { OutputPipeline, TailRing } from './output-pipeline.js';

function recorder() {
  const chunks: Array<{ stream: OutputStream; offset: number; data: string }> = [];
  const truncated: Array<{ stream: OutputStream; keptBytes: number }> = [];
  return {
    chunks,
    truncated,
    sink: {
      chunk: (stream: OutputStream, offset: number, data: Buffer) => chunks.push({ stream, offset, data: data.toString() }),
      truncated: (stream: OutputStream, keptBytes: number) => truncated.push({ stream, keptBytes }),
    },
  };
}

describe('OutputPipeline', () => {
  it('batches writes of one stream into one chunk with the right offset', () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 1000 });
    p.write('stdout', Buffer.from('ab'));
    p.write('stdout', Buffer.from('cd'));
    expect(r.chunks).toEqual([]);
    p.flush();
    expect(r.chunks).toEqual([{ stream: 'stdout', offset: 0, data: 'abcd' }]);
  });

  it('keeps the interleaving across streams: switching stream flushes the other', () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 1000 });
    p.write('stdout', Buffer.from('o1'));
    p.write('stderr', Buffer.from('e1'));
    p.write('stdout', Buffer.from('o2'));
    p.flush();
    expect(r.chunks).toEqual([
      { stream: 'stdout', offset: 0, data: 'o1' },
      { stream: 'stderr', offset: 0, data: 'e1' },
      { stream: 'stdout', offset: 2, data: 'o2' },
    ]);
  });

  it('flushes at maxBatchBytes', () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 1000, maxBatchBytes: 4 });
    p.write('stdout', Buffer.from('abcde'));
    expect(r.chunks).toEqual([{ stream: 'stdout', offset: 0, data: 'abcde' }]);
  });

  it('keeps maxKeptBytes per stream, reports truncation once, and still counts and hashes every byte', () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 5 });
    p.write('stdout', Buffer.from('abc'));
    p.write('stdout', Buffer.from('defgh'));
    p.write('stdout', Buffer.from('ijk'));
    p.flush();
    expect(r.chunks.map((c) => c.data).join('')).toBe('abcde');
    expect(r.truncated).toEqual([{ stream: 'stdout', keptBytes: 5 }]);
    const s = p.summary('stdout');
    expect(s.bytes).toBe(11);
    expect(s.keptBytes).toBe(5);
    expect(s.kept.toString()).toBe('abcde');
    expect(s.sha256).toBe(createHash('sha256').update('abcdefghijk').digest('hex'));
  });

  it('flushes a pending batch after flushIntervalMs', async () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 100, flushIntervalMs: 5 });
    p.write('stderr', Buffer.from('late'));
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(r.chunks).toEqual([{ stream: 'stderr', offset: 0, data: 'late' }]);
  });

  it('keeps the last 8 KiB of each stream as its tail, past the kept limit too', () => {
    const r = recorder();
    const p = new OutputPipeline(r.sink, { maxKeptBytes: 10 });
    p.write('stdout', Buffer.alloc(20_000, 'a'));
    p.write('stdout', Buffer.from('THE END'));
    const tail = p.summary('stdout').tail.toString();
    expect(tail.length).toBe(8192);
    expect(tail.endsWith('aaaTHE END')).toBe(true);
  });

  it('keeps as its tail exactly the last bytes of any run of writes: small ones wrapping the ring, ones larger than it, none', () => {
    const ring = new TailRing(16);
    let all = Buffer.alloc(0);
    expect(ring.bytes().length).toBe(0);
    // A fixed run of sizes: below, at and above the capacity, and writes that end exactly at the ring's end.
    const sizes = [1, 5, 10, 3, 0, 16, 7, 9, 40, 2, 15, 1, 1, 14, 17];
    sizes.forEach((size, i) => {
      const data = Buffer.alloc(size, String.fromCharCode(97 + (i % 26)));
      ring.write(data);
      all = Buffer.concat([all, data]);
      expect(ring.bytes().toString()).toBe(all.subarray(-16).toString());
    });
  });
});
