import { describe, expect, it } from 'vitest';
import { decodeReturn, encodeReturn, RETURN_FIELD, ReturnMessage } from './queue.js';
import type { ToolResult } from './objects.js';

/** A result as the agent sends it: kept output with NULs, other control characters and non-ASCII. */
function resultMessage(stdout: string, stderr: string): ReturnMessage {
  const result: ToolResult = {
    callId: 'call_1',
    status: 'succeeded',
    error: null,
    modelText: 'exit 0',
    exitCode: 0,
    signal: null,
    stdout,
    stderr,
    truncation: null,
    data: null,
    artifacts: [],
    receipt: null,
  };
  return { kind: 'result', callId: 'call_1', attemptId: 'att_1', result };
}

/** The entry's fields as XREAD returns them: Buffers. */
function asRead(fields: (string | Buffer)[]): Buffer[] {
  return fields.map((f) => (Buffer.isBuffer(f) ? f : Buffer.from(f)));
}

describe('encodeReturn / decodeReturn', () => {
  it('carries a result’s output beside the JSON, as UTF-8 bytes, and puts it back whole', () => {
    const stdout = '\0'.repeat(4096) + 'é ✓ \u0001\u001f end';
    const message = resultMessage(stdout, 'warn\n\0');
    const fields = encodeReturn(message);
    const json = fields[fields.indexOf(RETURN_FIELD) + 1] as string;
    // The JSON holds no output: 4 KiB of NULs would be 24 KiB of `\u0000` inside it.
    expect(json).not.toContain('\\u0000');
    expect(json.length).toBeLessThan(300);
    const total = fields.reduce((n, f) => n + Buffer.byteLength(f), 0);
    expect(total).toBeLessThan(Buffer.byteLength(stdout) + 400);
    const decoded = ReturnMessage.parse(decodeReturn(asRead(fields)));
    expect(decoded).toEqual(message);
  });

  it('decodes an older agent’s result, with the output inside the JSON, as it is', () => {
    const message = resultMessage('out\0put', '');
    const decoded = ReturnMessage.parse(decodeReturn(asRead([RETURN_FIELD, JSON.stringify(message)])));
    expect(decoded).toEqual(message);
  });

  it('leaves output fields beside a message without a result object out, so the parse refuses it', () => {
    const event = { kind: 'event', callId: 'c', attemptId: 'a', n: 1, body: { type: 'call.started' } };
    const withOutput = decodeReturn(asRead([RETURN_FIELD, JSON.stringify({ ...event, result: 'x' }), 'o', 'smuggled']));
    expect(withOutput).toEqual({ ...event, result: 'x' });
    const noOutput = decodeReturn(asRead([RETURN_FIELD, JSON.stringify({ kind: 'result', callId: 'c', attemptId: 'a', result: {} })]));
    expect(ReturnMessage.safeParse(noOutput).success).toBe(false);
  });

  it('returns null for an entry without a JSON object in `m`', () => {
    expect(decodeReturn(asRead(['o', 'x']))).toBeNull();
    expect(decodeReturn(asRead([RETURN_FIELD, '[1]']))).toBeNull();
    expect(decodeReturn(asRead([RETURN_FIELD, '{bad']))).toBeNull();
  });
});
