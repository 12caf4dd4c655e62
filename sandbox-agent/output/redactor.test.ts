import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Redaction, redactionMarker, type RedactionSecret } from './redactor.js';

const secret = (name: string, value: string | Buffer): RedactionSecret => ({
  name,
  value: Buffer.isBuffer(value) ? value : Buffer.from(value),
});
const R = (name: string): string => redactionMarker(name);

/** Feeds `input` to a stream redactor in pieces cut at `cuts` (sorted offsets). */
function streamed(redaction: Redaction, input: Buffer, cuts: number[]): Buffer {
  const r = redaction.stream();
  const out: Buffer[] = [];
  let from = 0;
  for (const cut of [...cuts, input.length]) {
    out.push(r.push(input.subarray(from, cut)));
    from = cut;
  }
  out.push(r.end());
  return Buffer.concat(out);
}

/**
 * The rules of redactor.ts written the slow, obvious way (every position compared with every
 * value), to check the streaming implementation against.
 */
function reference(secrets: RedactionSecret[], input: Buffer): Buffer {
  const unique = new Map<string, RedactionSecret>();
  for (const s of [...secrets].sort((a, b) => (a.name < b.name ? -1 : 1)))
    if (s.value.length > 0 && !unique.has(s.value.toString('hex'))) unique.set(s.value.toString('hex'), s);
  const occ: Array<{ start: number; end: number; name: string }> = [];
  for (const s of unique.values()) {
    for (let i = 0; i + s.value.length <= input.length; i += 1) {
      if (input.subarray(i, i + s.value.length).equals(s.value)) occ.push({ start: i, end: i + s.value.length, name: s.name });
    }
  }
  occ.sort((a, b) => a.start - b.start || b.end - a.end);
  const out: Buffer[] = [];
  let done = 0;
  let last: string | null = null;
  for (const o of occ) {
    if (o.end <= done) continue;
    if (o.start > done) out.push(input.subarray(done, o.start));
    if (o.start >= done || o.name !== last) {
      out.push(Buffer.from(R(o.name)));
      last = o.name;
    }
    done = o.end;
  }
  out.push(input.subarray(done));
  return Buffer.concat(out);
}

/** Checks one-shot, reference and every single split point (and byte-by-byte) agree. */
function checkAllSplits(secrets: RedactionSecret[], input: Buffer): Buffer {
  const redaction = new Redaction(secrets);
  const expected = reference(secrets, input);
  expect(redaction.redactBytes(input).equals(expected)).toBe(true);
  for (let cut = 0; cut <= input.length; cut += 1) {
    const got = streamed(redaction, input, [cut]);
    if (!got.equals(expected))
      throw new Error(`split at ${cut}: ${JSON.stringify(got.toString('latin1'))} != ${JSON.stringify(expected.toString('latin1'))}`);
  }
  const everyByte = Array.from({ length: input.length }, (_, i) => i);
  expect(streamed(redaction, input, everyByte).equals(expected)).toBe(true);
  return expected;
}

describe('redaction (one shot)', () => {
  it('replaces every occurrence of a value with [REDACTED:name], byte-exact elsewhere', () => {
    const r = new Redaction([secret('TOKEN', 'hunter2')]);
    expect(r.redactText('pw=hunter2; again hunter2.')).toBe(`pw=${R('TOKEN')}; again ${R('TOKEN')}.`);
    expect(r.redactText('nothing here')).toBe('nothing here');
  });

  it('a value containing another is reported under its own (longer) name', () => {
    const r = new Redaction([secret('SHORT', 'abc'), secret('LONG', 'xxabcxx')]);
    expect(r.redactText('1 xxabcxx 2 abc 3')).toBe(`1 ${R('LONG')} 2 ${R('SHORT')} 3`);
    const prefix = new Redaction([secret('P', 'tok'), secret('PL', 'token-123')]);
    expect(prefix.redactText('token-123 tok token')).toBe(`${R('PL')} ${R('P')} ${R('P')}en`);
  });

  it('overlapping values of two secrets leave no byte of either', () => {
    const r = new Redaction([secret('A', 'abcd'), secret('B', 'cdef')]);
    expect(r.redactText('-abcdef-')).toBe(`-${R('A')}${R('B')}-`);
  });

  it('a value overlapping itself is one marker; adjacent repeats are one marker each', () => {
    const r = new Redaction([secret('X', 'aa')]);
    expect(r.redactText('aaaaa')).toBe(R('X'));
    const s = new Redaction([secret('Y', 'ab')]);
    expect(s.redactText('abab')).toBe(`${R('Y')}${R('Y')}`);
  });

  it('two secrets with the same value: the marker names the first by name', () => {
    const r = new Redaction([secret('Z', 'same'), secret('A', 'same')]);
    expect(r.redactText('same')).toBe(R('A'));
  });

  it('no secrets, empty values and empty input pass through untouched', () => {
    const none = new Redaction([]);
    expect(none.active).toBe(false);
    expect(none.redactText('anything')).toBe('anything');
    const emptyValue = new Redaction([secret('E', '')]);
    expect(emptyValue.active).toBe(false);
    expect(emptyValue.redactText('abc')).toBe('abc');
    const r = new Redaction([secret('T', 'v')]);
    expect(r.redactBytes(Buffer.alloc(0)).length).toBe(0);
    const s = r.stream();
    expect(s.push(Buffer.alloc(0)).length).toBe(0);
    expect(s.end().length).toBe(0);
  });

  it('binary values in binary data, and values with multi-byte UTF-8', () => {
    const value = Buffer.from([0x00, 0xff, 0x10, 0x80, 0x00]);
    const input = Buffer.concat([Buffer.from([1, 2, 0x00]), value, Buffer.from([0xff, 0xff]), value]);
    const out = new Redaction([secret('BIN', value)]).redactBytes(input);
    expect(
      out.equals(Buffer.concat([Buffer.from([1, 2, 0x00]), Buffer.from(R('BIN')), Buffer.from([0xff, 0xff]), Buffer.from(R('BIN'))])),
    ).toBe(true);
    expect(new Redaction([secret('U', 'päss🔑')]).redactText('x päss🔑 y')).toBe(`x ${R('U')} y`);
  });

  it('redactDeep redacts every string of a JSON value and leaves the rest', () => {
    const r = new Redaction([secret('T', 's3cret')]);
    const value = { a: 's3cret!', n: 3, list: ['x', 'is s3cret', null, true], nested: { deep: 's3crets3cret' } };
    expect(r.redactDeep(value)).toEqual({
      a: `${R('T')}!`,
      n: 3,
      list: ['x', `is ${R('T')}`, null, true],
      nested: { deep: `${R('T')}${R('T')}` },
    });
    expect(value.a).toBe('s3cret!');
  });
});

describe('redaction (streams)', () => {
  it('a value split at every offset is redacted the same as whole', () => {
    checkAllSplits([secret('TOKEN', 'sk-live-0123456789')], Buffer.from('before sk-live-0123456789 middle sk-live-0123456789'));
  });

  it('several secrets, overlapping, contained, repeated and near-misses, at every split', () => {
    const secrets = [secret('A', 'abcd'), secret('B', 'cdef'), secret('C', 'bc'), secret('D', 'abcdefgh'), secret('E', 'aa')];
    checkAllSplits(secrets, Buffer.from('abcdefgh abcdef abc abcd bcd aaaa abcdefg cdefcdef ab'));
  });

  it('holds back only what may begin a value: output not resembling a secret streams at once', () => {
    const r = new Redaction([secret('TOKEN', 'sk-live-0123456789')]).stream();
    expect(r.push(Buffer.from('hello\n')).toString()).toBe('hello\n');
    expect(r.push(Buffer.from('key: sk-li')).toString()).toBe('key: ');
    expect(r.push(Buffer.from('ve-0123')).toString()).toBe('');
    expect(r.push(Buffer.from('456789 ok')).toString()).toBe(`${R('TOKEN')} ok`);
    expect(r.push(Buffer.from('sk-')).toString()).toBe('');
    expect(r.end().toString()).toBe('sk-');
  });

  it('holds back at most maxLength-1 bytes, even for a run of a self-overlapping value', () => {
    const redaction = new Redaction([secret('X', 'aaaa')]);
    const r = redaction.stream();
    let out = '';
    for (let i = 0; i < 1000; i += 1) {
      out += r.push(Buffer.from('a')).toString();
      expect(r.heldBytes).toBeLessThanOrEqual(redaction.maxLength - 1);
    }
    out += r.end().toString();
    expect(out).toBe(R('X'));
  });

  it('random secrets and random data with planted values agree with the reference at random splits', () => {
    for (let round = 0; round < 200; round += 1) {
      const alphabet = Buffer.from('abc\n\0\xff', 'latin1');
      const pick = (n: number): Buffer =>
        Buffer.from(Array.from({ length: n }, () => alphabet[Math.floor(Math.random() * alphabet.length)]!));
      const secrets = Array.from({ length: 1 + Math.floor(Math.random() * 4) }, (_, i) =>
        secret(`S${i}`, pick(1 + Math.floor(Math.random() * 6))),
      );
      const parts: Buffer[] = [];
      for (let i = 0; i < 20; i += 1)
        parts.push(Math.random() < 0.3 ? secrets[Math.floor(Math.random() * secrets.length)]!.value : pick(Math.floor(Math.random() * 5)));
      const input = Buffer.concat(parts);
      const cuts = [...new Set(Array.from({ length: 5 }, () => Math.floor(Math.random() * (input.length + 1))))].sort((a, b) => a - b);
      const redaction = new Redaction(secrets);
      const expected = reference(secrets, input);
      const got = streamed(redaction, input, cuts);
      if (!got.equals(expected))
        throw new Error(
          `mismatch: secrets ${JSON.stringify(secrets.map((s) => s.value.toString('latin1')))} input ${JSON.stringify(input.toString('latin1'))} cuts ${cuts}`,
        );
    }
  });

  it('large random output with a long secret split across 64 KiB chunks', () => {
    const value = randomBytes(4096);
    const noise = randomBytes(300_000);
    const input = Buffer.concat([noise.subarray(0, 65_000), value, noise.subarray(65_000, 200_000), value, noise.subarray(200_000)]);
    const redaction = new Redaction([secret('KEY', value)]);
    const cuts = [];
    for (let c = 65_536; c < input.length; c += 65_536) cuts.push(c);
    const out = streamed(redaction, input, cuts);
    expect(out.includes(value)).toBe(false);
    expect(out.length).toBe(input.length - 2 * value.length + 2 * Buffer.byteLength(R('KEY')));
    expect(out.equals(redaction.redactBytes(input))).toBe(true);
  });

  it('after end() a stream starts afresh', () => {
    const r = new Redaction([secret('T', 'xyz')]).stream();
    expect(r.push(Buffer.from('xy')).toString()).toBe('');
    expect(r.end().toString()).toBe('xy');
    expect(Buffer.concat([r.push(Buffer.from('zxyz')), r.end()]).toString()).toBe(`z${R('T')}`);
  });
});
