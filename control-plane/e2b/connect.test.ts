import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { ConnectError, MAX_REQUEST_MESSAGE_BYTES, endStream, envelope, readEnvelope, toConnectError } from './connect.js';

describe('Connect protocol framing', () => {
  it('reads back one enveloped JSON message and writes the end-stream envelope', () => {
    expect(readEnvelope(envelope({ process: { pid: 7 } }))).toEqual({ process: { pid: 7 } });
    const end = endStream(new ConnectError('not_found', 'gone'));
    expect([end[0], JSON.parse(end.subarray(5).toString())]).toEqual([2, { error: { code: 'not_found', message: 'gone' } }]);
    expect(JSON.parse(endStream().subarray(5).toString())).toEqual({});
  });

  it('refuses short, long, compressed, trailing and non-JSON bodies with invalid_argument or resource_exhausted', () => {
    const code = (body: Buffer): string => {
      try {
        readEnvelope(body);
        return 'read';
      } catch (err) {
        return (err as ConnectError).code;
      }
    };
    const ok = envelope({});
    expect(code(Buffer.from([0, 0]))).toBe('invalid_argument');
    expect(code(Buffer.concat([ok, Buffer.from('x')]))).toBe('invalid_argument');
    expect(code(Buffer.from([1, 0, 0, 0, 2, 0x7b, 0x7d]))).toBe('invalid_argument');
    expect(code(Buffer.from([0, 0, 0, 0, 3, 0x7b, 0x7b, 0x7b]))).toBe('invalid_argument');
    const huge = Buffer.alloc(5);
    huge.writeUInt32BE(MAX_REQUEST_MESSAGE_BYTES + 1, 1);
    expect(code(huge)).toBe('resource_exhausted');
  });

  it('fuzz: random bytes never throw anything but a ConnectError', () => {
    for (let i = 0; i < 5000; i += 1) {
      const body = randomBytes(Math.floor(Math.random() * 24));
      if (i % 3 === 0 && body.length >= 5) body.writeUInt32BE(body.length - 5, 1);
      try {
        readEnvelope(body);
      } catch (err) {
        expect(err).toBeInstanceOf(ConnectError);
      }
    }
  });

  it('maps sbx errors to the codes E2B clients branch on', () => {
    expect(toConnectError(new AppError('lease.not_found', 'x')).code).toBe('not_found');
    expect(toConnectError(new AppError('input.invalid', 'x')).code).toBe('invalid_argument');
    expect(toConnectError(new AppError('envd.token_invalid', 'x')).code).toBe('unauthenticated');
    expect(toConnectError(new Error('boom'))).toMatchObject({ code: 'internal', message: 'internal error' });
  });
});
