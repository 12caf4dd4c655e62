import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { TRANSFER_FRAME, TRANSFER_FRAME_MAX_BYTES, type TransferEnd } from '../../contract/transfers.js';
import { AgentTunnels } from './tunnels.js';
import { FrameReader } from './frames.js';

function frame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

const END: TransferEnd = { exitCode: 0, signal: null, stderr: '' };

/** Feeds `bytes` to a FrameReader in chunks cut at `cuts`; what it handed over, or the error it refused them with. */
async function read(bytes: Buffer, cuts: number[] = []): Promise<{ data: Buffer; end: TransferEnd | null; error: unknown }> {
  const parts: Buffer[] = [];
  let at = 0;
  for (const cut of [...cuts.filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b), bytes.length]) {
    parts.push(bytes.subarray(at, cut));
    at = cut;
  }
  const data: Buffer[] = [];
  let end: TransferEnd | null = null;
  const reader = new FrameReader(
    (payload) => {
      data.push(Buffer.from(payload));
      return true;
    },
    (e) => (end = e),
  );
  const error = await pipeline(Readable.from(parts), reader).then(
    () => null,
    (err: unknown) => err,
  );
  return { data: Buffer.concat(data), end, error };
}

/** A deterministic generator (mulberry32), so a failing case can be replayed by its seed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('FrameReader (the agent → control plane transfer frames)', () => {
  it('hands over every DATA payload in order and the END, however the stream is cut (500 seeds)', async () => {
    for (let seed = 0; seed < 500; seed += 1) {
      const next = random(seed);
      const payloads = Array.from({ length: 1 + Math.floor(next() * 6) }, (_, i) => Buffer.alloc(Math.floor(next() * 3000), i + 1));
      const end: TransferEnd = { exitCode: Math.floor(next() * 3), signal: null, stderr: 'é'.repeat(Math.floor(next() * 5)) };
      const bytes = Buffer.concat([
        ...payloads.map((p) => frame(TRANSFER_FRAME.data, p)),
        frame(TRANSFER_FRAME.end, Buffer.from(JSON.stringify(end))),
      ]);
      const cuts = Array.from({ length: Math.floor(next() * 8) }, () => Math.floor(next() * bytes.length));
      const got = await read(bytes, cuts);
      expect(got.error, `seed ${seed}`).toBeNull();
      expect(got.data.equals(Buffer.concat(payloads)), `seed ${seed}`).toBe(true);
      expect(got.end, `seed ${seed}`).toEqual(end);
    }
  });

  it.each([
    ['an unknown frame type', frame(7, Buffer.from('x')), 'a frame of type 7'],
    ['a frame over the largest payload', Buffer.from([TRANSFER_FRAME.data, 0xff, 0xff, 0xff, 0xff]), `${0xffffffff} bytes`],
    ['an END that is not JSON', frame(TRANSFER_FRAME.end, Buffer.from('{not json')), 'not one'],
    ['an END of the wrong shape', frame(TRANSFER_FRAME.end, Buffer.from('{"exitCode":"0"}')), 'not one'],
    [
      'bytes after the END',
      Buffer.concat([frame(TRANSFER_FRAME.end, Buffer.from(JSON.stringify(END))), frame(1, Buffer.from('x'))]),
      'after the end',
    ],
    ['a stream that stops before the END', frame(TRANSFER_FRAME.data, Buffer.from('partial')), 'before the end frame'],
    ['a stream cut inside a frame header', Buffer.from([TRANSFER_FRAME.data, 0]), 'before the end frame'],
  ])('refuses %s as files.transfer_broken', async (_label, bytes, reason) => {
    const { error } = await read(bytes);
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe('files.transfer_broken');
    expect(String((error as AppError).details?.reason)).toContain(reason);
  });

  it(`takes a payload of exactly TRANSFER_FRAME_MAX_BYTES (${TRANSFER_FRAME_MAX_BYTES})`, async () => {
    const payload = Buffer.alloc(TRANSFER_FRAME_MAX_BYTES, 7);
    const got = await read(
      Buffer.concat([frame(TRANSFER_FRAME.data, payload), frame(TRANSFER_FRAME.end, Buffer.from(JSON.stringify(END)))]),
      [3, 70_000],
    );
    expect(got.error).toBeNull();
    expect(got.data.length).toBe(TRANSFER_FRAME_MAX_BYTES);
  });

  it('never throws on random bytes: each stream is handed over or refused with files.transfer_broken (2,000 seeds)', async () => {
    for (let seed = 0; seed < 2000; seed += 1) {
      const next = random(seed);
      const bytes = Buffer.from(Array.from({ length: Math.floor(next() * 64) }, () => Math.floor(next() * 256)));
      // Some streams start with a plausible header, so the parser goes past the first check.
      if (bytes.length > 5 && next() < 0.5) bytes.writeUInt8(1 + Math.floor(next() * 2), 0);
      const { error } = await read(bytes, [Math.floor(next() * bytes.length)]);
      if (error !== null) expect((error as AppError).code, `seed ${seed}`).toBe('files.transfer_broken');
    }
  });
});

describe('AgentTunnels.openTransfer', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('an agent that never brings the connection is files.agent_unreachable (504) after the dial timeout, and the listener closes', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-transfer-'));
    dirs.push(dir);
    const signalled: unknown[] = [];
    const tunnels = new AgentTunnels({
      processId: '0123456789abcdef',
      dirOf: () => dir,
      signal: async (_id, message) => void signalled.push(message),
      log: { warn: () => undefined },
      dialTimeoutMs: 200,
    });
    const error = await tunnels.openTransfer('sbx_x', { kind: 'pack', path: '/workspace/a', root: '/workspace' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe('files.agent_unreachable');
    expect((error as AppError).status).toBe(504);
    expect(signalled).toEqual([
      expect.objectContaining({ type: 'transfer_open', op: { kind: 'pack', path: '/workspace/a', root: '/workspace' } }),
    ]);
    await tunnels.close();
  });
});
