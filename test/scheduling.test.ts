/**
 * Accesses resolved in the agent: writes to different files run side by side, writes to one
 * file (however it is spelled: a symlink, `./`) never overlap.
 *
 * How overlap is observed: by the agent's own receipt timings (`startedAt`/`endedAt`, taken by
 * the tool after the scheduler let the call start, and before it let the next conflicting one).
 * For "never overlap" that is sound outright: the scheduler releases a call's slot only after
 * its tool ended, so a later conflicting call's start is never before the earlier one's end.
 * For "overlap" a positive answer is sound too (both started before either ended, which a
 * serialising scheduler cannot produce); what timing could do is hide it (one write done before
 * the other arrives), so the writes carry payloads large enough (8 MB, hashed and fsynced) that
 * they outlast the gap between two concurrently submitted calls, and up to three rounds are tried. No file tool can block on
 * another call (reads refuse FIFOs, writes go through a temp file and rename), so a
 * deterministic handshake between two file calls is not available.
 */
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;

useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

async function call(tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const r = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 120 });
  if (!('receipt' in r)) throw new Error(`${tool} did not finish`);
  return r;
}

const big = (c: string): string => c.repeat(8 * 1024 * 1024);

/** [start, end] in ms of a finished call, from the agent's receipt. */
function span(r: ToolResult): [number, number] {
  expect(r.status).toBe('succeeded');
  return [Date.parse(r.receipt!.startedAt), Date.parse(r.receipt!.endedAt)];
}

describe('access-aware scheduling', () => {
  it('two writes to different files overlap in time', async () => {
    // A serialising scheduler can never produce an overlap, so seeing one in any round proves
    // the writes ran side by side; up to three rounds keep a loaded machine's scheduling gap
    // (one write done before the other was picked up) from hiding it.
    const rounds: Array<{ a: [number, number]; b: [number, number] }> = [];
    for (let round = 0; round < 3; round += 1) {
      const [a, b] = await Promise.all([
        call('write_file', { path: `/workspace/one-${round}.txt`, content: big('a') }),
        call('write_file', { path: `/workspace/two-${round}.txt`, content: big('b') }),
      ]);
      rounds.push({ a: span(a), b: span(b) });
      const last = rounds[rounds.length - 1]!;
      if (last.a[0] < last.b[1] && last.b[0] < last.a[1]) break;
    }
    const last = rounds[rounds.length - 1]!;
    expect(last.a[0], JSON.stringify(rounds)).toBeLessThan(last.b[1]);
    expect(last.b[0], JSON.stringify(rounds)).toBeLessThan(last.a[1]);
  });

  it('two writes to one file, also via a symlink and a ./ spelling, never overlap', async () => {
    expect((await call('write_file', { path: '/workspace/same.txt', content: 'v0' })).status).toBe('succeeded');
    const link = await call('exec', { argv: ['ln', '-s', '/workspace/same.txt', '/workspace/same-link'] });
    expect(link.status).toBe('succeeded');
    const writes = await Promise.all([
      call('write_file', { path: '/workspace/same.txt', content: big('x') }),
      call('write_file', { path: '/workspace/same-link', content: big('y') }),
      call('write_file', { path: '/workspace/./same.txt', content: big('z') }),
    ]);
    const spans = writes.map(span).sort((p, q) => p[0] - q[0]);
    for (let i = 1; i < spans.length; i += 1) expect(spans[i]![0]).toBeGreaterThanOrEqual(spans[i - 1]![1]);
  });
});
