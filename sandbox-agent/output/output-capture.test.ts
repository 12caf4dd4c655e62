import { createHash } from 'node:crypto';
import { access, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventBody } from '../../contract/events.js';
import { OutputCapture, type CaptureContext } from './output-capture.js';
import { Redaction } from './redactor.js';
import { SpoolBudget } from './spool.js';

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

/**
 * A context whose offered artifacts are read back at once (name, bytes) and then released, as
 * the shelf does once the control plane fetched them; the digest offered with a file must be the
 * file's own. Events are collected.
 */
async function fakeContext(maxOutputBytes: number, maxArtifactBytes = 1024, secret?: string) {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-capture-'));
  dirs.push(dir);
  const events: EventBody[] = [];
  const uploads: Array<{ name: string; bytes: Buffer }> = [];
  const budget = new SpoolBudget(1 << 20);
  const ctx: CaptureContext = {
    attemptId: 'att_1',
    maxOutputBytes,
    spool: { dir, maxArtifactBytes, budget },
    secrets: { redaction: new Redaction(secret ? [{ name: 'TOKEN', value: Buffer.from(secret) }] : []) } as CaptureContext['secrets'],
    emit: (body) => events.push(body),
    offerArtifact: async (file, name) => {
      const bytes = await readFile(file.path);
      const sha256 = createHash('sha256').update(bytes).digest('hex');
      if (file.digest) expect(file.digest).toEqual({ size: bytes.length, sha256 });
      uploads.push({ name, bytes });
      await file.release();
      return { id: `art_${uploads.length}`, sha256, size: bytes.length };
    },
  };
  return { ctx, dir, events, uploads, budget };
}

describe('OutputCapture', () => {
  it('a stream the result holds whole leaves no artifact and no spool file', async () => {
    const { ctx, dir, uploads } = await fakeContext(100);
    const capture = new OutputCapture(ctx, { streams: ['stdout', 'stderr'] });
    capture.write('stdout', Buffer.from('hello\n'));
    capture.write('stderr', Buffer.from('warn\n'));
    const { fields } = await capture.finish();
    expect(fields.stdout).toBe('hello\n');
    expect(fields.stderr).toBe('warn\n');
    expect(fields.truncation).toBeNull();
    expect(fields.artifacts).toEqual([]);
    expect(uploads).toEqual([]);
    await expect(access(join(dir, 'att_1.stdout'))).rejects.toThrow();
  });

  it('a stream cut at the bound goes whole to an artifact with sha256, and the truncation says so explicitly', async () => {
    const { ctx, events, uploads } = await fakeContext(4);
    const capture = new OutputCapture(ctx, { streams: ['stdout', 'stderr'], combined: true });
    capture.write('stdout', Buffer.from('0123456789'));
    const { fields } = await capture.finish();
    expect(fields.stdout).toBe('0123');
    expect(uploads).toEqual([{ name: 'stdout.log', bytes: Buffer.from('0123456789') }]);
    expect(fields.truncation).toEqual({
      stdout: {
        truncated: true,
        originalBytes: 10,
        keptBytes: 4,
        strategy: 'head',
        fullArtifact: 'art_1',
        artifactTruncated: false,
      },
      stderr: null,
    });
    expect(fields.outputs).toEqual({
      stdout: { bytes: 10, sha256: createHash('sha256').update('0123456789').digest('hex'), keptBytes: 4 },
      stderr: { bytes: 0, sha256: createHash('sha256').digest('hex'), keptBytes: 0 },
      combined: true,
    });
    expect(fields.artifacts).toEqual([{ id: 'art_1', sha256: createHash('sha256').update('0123456789').digest('hex'), size: 10 }]);
    expect(events).toContainEqual({ type: 'output.truncated', stream: 'stdout', keptBytes: 4, combined: true });
  });

  it('keepArtifact always: a transcript under its own name, marked when even the spool was cut', async () => {
    const { ctx, uploads } = await fakeContext(100, 3);
    const capture = new OutputCapture(ctx, { streams: ['stdout'], names: { stdout: 'transcript' }, keepArtifact: 'always' });
    capture.write('stdout', Buffer.from('abcdef'));
    const { artifactOf, fields } = await capture.finish();
    expect(uploads).toEqual([{ name: 'transcript.log', bytes: Buffer.from('abc') }]);
    expect(artifactOf.stdout).toMatchObject({ artifact: { id: 'art_1', size: 3 }, spoolTruncated: true });
    expect(fields.truncation).toBeNull();
    expect(fields.stderr).toBe('');
  });

  it('redacts before anything else sees the bytes, also a value split across writes and the live hook', async () => {
    const live: string[] = [];
    const { ctx, uploads } = await fakeContext(2, 1024, 's3cret');
    const capture = new OutputCapture(ctx, {
      streams: ['stdout'],
      keepArtifact: 'always',
      onRedacted: (_stream, data) => live.push(data.toString()),
    });
    capture.write('stdout', Buffer.from('a s3'));
    capture.write('stdout', Buffer.from('cret b'));
    const { summaries } = await capture.finish();
    expect(uploads[0]!.bytes.toString()).toBe('a [REDACTED:TOKEN] b');
    expect(live.join('')).toBe('a [REDACTED:TOKEN] b');
    expect(summaries.stdout.bytes).toBe('a [REDACTED:TOKEN] b'.length);
  });

  it('discard removes the spools and gives their bytes back to the budget', async () => {
    const { ctx, dir, budget } = await fakeContext(100);
    const capture = new OutputCapture(ctx, { streams: ['stdout', 'stderr'] });
    capture.write('stdout', Buffer.alloc(10));
    await capture.discard();
    await expect(access(join(dir, 'att_1.stdout'))).rejects.toThrow();
    expect(budget.take(1 << 20)).toBe(1 << 20);
  });
});
