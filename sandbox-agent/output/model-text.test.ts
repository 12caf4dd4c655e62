import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { modelTextOf } from './model-text.js';
import type { StreamSummary } from './output-pipeline.js';

const summary = (text: string, keptBytes = Buffer.byteLength(text)): StreamSummary => {
  const bytes = Buffer.from(text);
  return {
    bytes: bytes.length,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    keptBytes,
    kept: bytes.subarray(0, keptBytes),
    tail: bytes.subarray(-8192),
  };
};
const none = summary('');

describe('modelTextOf', () => {
  it('shows short output whole, stream by stream, after the headline', () => {
    expect(modelTextOf('exit 0', summary('out\n'), summary('err\n'))).toBe('exit 0\nstdout:\nout\n\nstderr:\nerr\n');
    expect(modelTextOf('exit 0', none, none)).toBe('exit 0');
  });

  it('shows the head, the omitted byte count and the real tail of long output, cut between characters', () => {
    const text = `${'😀'.repeat(3000)}THE END`;
    const out = modelTextOf('exit 0', summary(text, 1000), none);
    expect(out).toMatch(/^exit 0\nstdout \(\d+ bytes\):\n/);
    expect(out).toMatch(/\[\.\.\. \d+ bytes omitted \.\.\.\]/);
    expect(out.endsWith('THE END')).toBe(true);
    expect(out).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
    expect(out.length).toBeLessThan(5000);
  });
});
