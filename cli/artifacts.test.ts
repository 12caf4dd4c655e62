/**
 * The rest of a cut stream (artifacts.ts) against artifact readers made here: a read that breaks
 * after moving bytes is made again from where the output is; a digest that does not match, an
 * artifact cut at the spool cap and a missing artifact are said and fail; Ctrl-C stops quietly.
 */
import { createHash } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { writeCutOutput } from './artifacts.js';

const whole = Buffer.from(Array.from({ length: 5000 }, (_, i) => `${i}\n`).join(''));
const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const kept = 1000;

function resultOf(over: { artifactTruncated?: boolean; fullArtifact?: string | null; receiptSha256?: string } = {}): ToolResult {
  const fullArtifact = over.fullArtifact === undefined ? 'art_1' : over.fullArtifact;
  return {
    truncation: {
      stdout: {
        truncated: true,
        originalBytes: whole.length,
        keptBytes: kept,
        strategy: 'head',
        fullArtifact,
        artifactTruncated: over.artifactTruncated ?? false,
      },
      stderr: null,
    },
    receipt: { artifacts: fullArtifact ? [{ id: fullArtifact, sha256: over.receiptSha256 ?? sha256(whole), size: whole.length }] : [] },
  } as unknown as ToolResult;
}

/** A reader whose answers are `reads` in turn: each the bytes it gives, then, if `breakAfter`, an error. */
function reader(reads: Array<{ bytes: Buffer; breakAfter?: boolean }>, served: string | null = sha256(whole)) {
  let n = 0;
  return {
    opened: () => n,
    artifact: async () => {
      const read = reads[Math.min(n, reads.length - 1)]!;
      n += 1;
      const chunks = [read.bytes.subarray(0, 1500), read.bytes.subarray(1500)];
      const stream = Readable.from(
        (async function* () {
          for (const c of chunks) yield c;
          if (read.breakAfter) throw new Error('aborted');
        })(),
      );
      return Object.assign(stream, { sha256: served });
    },
  };
}

function sinks() {
  const out: Buffer[] = [];
  const notices: string[] = [];
  const stdout = new PassThrough().on('data', (c: Buffer) => out.push(c));
  const stderr = new PassThrough().on('data', (c: Buffer) => notices.push(c.toString()));
  return { sinks: { stdout, stderr }, out: () => Buffer.concat(out), notices: () => notices.join('') };
}

describe('the rest of a cut stream', () => {
  it('writes exactly the bytes past those printed, checked against the receipt', async () => {
    const s = sinks();
    expect(await writeCutOutput(reader([{ bytes: whole }]), 'sbx_1', resultOf(), { stdout: kept, stderr: 0 }, s.sinks)).toBe(true);
    expect(s.out().equals(whole.subarray(kept))).toBe(true);
    expect(s.notices()).toBe('');
  });

  it('a read that breaks after moving bytes is made again, skipping what was written', async () => {
    const s = sinks();
    const r = reader([{ bytes: whole.subarray(0, 3000), breakAfter: true }, { bytes: whole }]);
    expect(await writeCutOutput(r, 'sbx_1', resultOf(), { stdout: kept, stderr: 0 }, s.sinks)).toBe(true);
    expect(r.opened()).toBe(2);
    expect(s.out().equals(whole.subarray(kept))).toBe(true);
  });

  it('a read that breaks before moving a byte is not made again: said, and false', async () => {
    const s = sinks();
    const r = reader([{ bytes: whole.subarray(0, 500), breakAfter: true }]);
    expect(await writeCutOutput(r, 'sbx_1', resultOf(), { stdout: kept, stderr: 0 }, s.sinks)).toBe(false);
    expect(r.opened()).toBe(1);
    expect(s.notices()).toBe(
      `sbx: stdout was cut at ${kept} of ${whole.length} bytes; reading the rest from artifact art_1 failed: aborted\n`,
    );
  });

  it('bytes that do not match the receipt, or the served digest when the receipt has none, are said and false', async () => {
    const tampered = Buffer.from(whole);
    tampered[4000] = 0x21;
    const s = sinks();
    expect(await writeCutOutput(reader([{ bytes: tampered }]), 'sbx_1', resultOf(), { stdout: kept, stderr: 0 }, s.sinks)).toBe(false);
    expect(s.notices()).toContain(`arrived with sha256 ${sha256(tampered)}, not ${sha256(whole)}`);
    const noReceipt = { ...resultOf(), receipt: null } as ToolResult;
    const t = sinks();
    expect(await writeCutOutput(reader([{ bytes: tampered }]), 'sbx_1', noReceipt, { stdout: kept, stderr: 0 }, t.sinks)).toBe(false);
    expect(t.notices()).toContain(`not ${sha256(whole)}`);
  });

  it('an artifact cut at the spool cap, or no artifact, is said and false', async () => {
    const s = sinks();
    const head = whole.subarray(0, 2000);
    const capped = resultOf({ artifactTruncated: true, receiptSha256: sha256(head) });
    expect(await writeCutOutput(reader([{ bytes: head }], sha256(head)), 'sbx_1', capped, { stdout: kept, stderr: 0 }, s.sinks)).toBe(
      false,
    );
    expect(s.out().equals(head.subarray(kept))).toBe(true);
    expect(s.notices()).toContain('the sandbox kept only its first 2000 bytes (its spool cap): bytes past 2000 are lost');
    const t = sinks();
    expect(
      await writeCutOutput(reader([{ bytes: whole }]), 'sbx_1', resultOf({ fullArtifact: null }), { stdout: kept, stderr: 0 }, t.sinks),
    ).toBe(false);
    expect(t.notices()).toContain('no artifact holds the rest');
  });

  it('after Ctrl-C nothing more is written or said', async () => {
    const s = sinks();
    const ctrlC = new AbortController();
    ctrlC.abort();
    expect(await writeCutOutput(reader([{ bytes: whole }]), 'sbx_1', resultOf(), { stdout: kept, stderr: 0 }, s.sinks, ctrlC.signal)).toBe(
      false,
    );
    expect(s.out().length).toBe(0);
    expect(s.notices()).toBe('');
  });
});
