/**
 * Archive fuzzing of `PUT /v1/sandboxes/:id/files` against a control plane in its own process
 * (`main.js`, so a crash shows as a dead process and its RSS is its own): archives truncated at
 * every 512-byte boundary and inside headers, then fast-check batches of flipped bytes, wrong
 * checksums, sizes larger than the body, absurd and negative sizes (octal and base-256), pax
 * headers with huge lengths, and long and non-UTF-8 names. Every answer is a 4xx in the
 * documented error shape with a catalogued code and status, or a 200 after which the sandbox
 * holds exactly what the archive holds; a rejected archive writes nothing; the process answers
 * `/healthz` after every batch and its memory stays bounded.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { posix } from 'node:path';
import fc from 'fast-check';
import * as tar from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES, ErrorBody } from '../contract/errors.js';
import type { ToolResult } from '../contract/objects.js';
import { planeIdentity, startChildPlane, type ChildPlane, startHarness, tarBytes, type FixtureEntry } from './fixtures/index.js';

const BLOCK = 512;
const CONCURRENCY = 6;
const BATCH = 50;
const FAST_CHECK_RUNS = 36;
/** Fixed so that a failure can be replayed; printed with the figures. */
const FAST_CHECK_SEED = 20261201;

const identity = planeIdentity('fuzz');
let plane: ChildPlane;
let leaseId: string;

beforeAll(async () => {
  plane = await startChildPlane(identity);
  leaseId = (await plane.client.createSandbox()).id;
}, 120_000);

afterAll(async () => {
  await plane?.kill9();
  // A harness with the same identity releases the lease and removes what the child left.
  const h = await startHarness({ SBX_OWNER: identity.owner, SBX_REDIS_PREFIX: identity.prefix, SBX_SECRETS_KEY: identity.secretsKey });
  await h.close();
}, 120_000);

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Seed archives: small trees, a long (pax) name, a pax header with a record, a 100 KB member. */
const SEED_ENTRIES: FixtureEntry[][] = [
  [
    { name: 'd', type: 'directory' },
    { name: 'd/a.txt', content: 'a'.repeat(700) },
    { name: 'b.txt', content: 'b'.repeat(3000) },
    { name: 'd/l', type: 'symlink', linkname: 'a.txt' },
  ],
  [
    { name: `${'long-dir/'.repeat(20)}file-with-a-long-path.txt`, content: 'deep' },
    { name: 'x'.repeat(300), content: 'name too long for ext4' },
  ],
  [{ name: 'p.txt', content: 'pax', pax: { comment: 'c'.repeat(600) } } as FixtureEntry, { name: 'q.txt', content: 'q'.repeat(1200) }],
  [
    { name: 'first.txt', content: 'one' },
    { name: 'big.bin', content: 'z'.repeat(100_000) },
    { name: 'after.txt', content: 'after' },
  ],
];
let seeds: Buffer[] = [];

/** Offsets of the header blocks of a well-formed archive (the seeds'), end-of-archive excluded. */
function headerOffsets(archive: Buffer): number[] {
  const offsets: number[] = [];
  for (let at = 0; at + BLOCK <= archive.length;) {
    const block = archive.subarray(at, at + BLOCK);
    if (block.every((b) => b === 0)) break;
    offsets.push(at);
    const size = parseInt(block.subarray(124, 136).toString('latin1').replace(/\0.*$/s, '').trim() || '0', 8);
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
  }
  return offsets;
}

/** Rewrites the header checksum (bytes 148..155) for the block at `at`, as a valid header has it. */
function fixChecksum(archive: Buffer, at: number): void {
  archive.fill(0x20, at + 148, at + 156);
  let sum = 0;
  for (let i = at; i < at + BLOCK; i++) sum += archive[i]!;
  archive.write(`${sum.toString(8).padStart(6, '0')}\0 `, at + 148, 'latin1');
}

type SizeField =
  | { encoding: 'octal'; value: number }
  | { encoding: 'octal-junk'; text: string }
  | { encoding: 'base256'; negative: boolean; bytes: number[] };

type Mutation =
  | { kind: 'truncate'; seed: number; at: number }
  | { kind: 'flip'; seed: number; where: number; bit: number }
  | { kind: 'checksum'; seed: number; header: number; delta: number }
  | { kind: 'size'; seed: number; header: number; size: SizeField }
  | { kind: 'pax'; seed: number; variant: 'record-length' | 'header-size'; digits: string }
  | { kind: 'name'; seed: number; header: number; bytes: number[] };

/** The mutated archive. */
function apply(m: Mutation): Buffer {
  const archive = Buffer.from(seeds[m.seed]!);
  const headers = headerOffsets(archive);
  const header = (i: number): number => headers[i % headers.length]!;
  switch (m.kind) {
    case 'truncate':
      return archive.subarray(0, m.at);
    case 'flip': {
      const at = Math.floor(m.where * archive.length);
      archive[at] = archive[at]! ^ (1 << m.bit);
      return archive;
    }
    case 'checksum': {
      const at = header(m.header) + 148;
      archive[at + 2] = (archive[at + 2]! + m.delta) & 0xff;
      return archive;
    }
    case 'size': {
      const at = header(m.header);
      const field = archive.subarray(at + 124, at + 136);
      field.fill(0);
      if (m.size.encoding === 'octal') field.write(`${m.size.value.toString(8).padStart(11, '0').slice(-11)}\0`, 'latin1');
      else if (m.size.encoding === 'octal-junk') field.write(m.size.text.slice(0, 12), 'latin1');
      else {
        field[0] = m.size.negative ? 0xff : 0x80;
        m.size.bytes.slice(0, 11).forEach((b, i) => (field[1 + i] = b));
      }
      fixChecksum(archive, at);
      return archive;
    }
    case 'pax': {
      const at = headers.find((h) => archive[h + 156] === 0x78) ?? header(0); // typeflag 'x'
      if (m.variant === 'header-size') {
        archive.write(`${m.digits.slice(0, 11).padStart(11, '0')}\0`, at + 124, 'latin1');
        fixChecksum(archive, at);
      } else archive.write(`${m.digits} `, at + BLOCK, 'latin1');
      return archive;
    }
    case 'name': {
      const at = header(m.header);
      archive.fill(0, at, at + 100);
      Buffer.from(m.bytes.slice(0, 100)).copy(archive, at);
      fixChecksum(archive, at);
      return archive;
    }
  }
}

const seedIndex = fc.nat({ max: SEED_ENTRIES.length - 1 });
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({
    kind: fc.constant('flip' as const),
    seed: seedIndex,
    where: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    bit: fc.nat({ max: 7 }),
  }),
  fc.record({ kind: fc.constant('checksum' as const), seed: seedIndex, header: fc.nat({ max: 8 }), delta: fc.integer({ min: 1, max: 7 }) }),
  fc.record({
    kind: fc.constant('size' as const),
    seed: seedIndex,
    header: fc.nat({ max: 8 }),
    size: fc.oneof(
      fc.record({
        encoding: fc.constant('octal' as const),
        value: fc.oneof(fc.integer({ min: 1, max: 300_000 }), fc.constant(8 ** 11 - 1)),
      }),
      fc.record({
        encoding: fc.constant('octal-junk' as const),
        text: fc.constantFrom('99999999999', '-0000000001', '1e400', ' ', 'NaN', '\x7f\x7f\x7f'),
      }),
      fc.record({
        encoding: fc.constant('base256' as const),
        negative: fc.boolean(),
        bytes: fc.array(fc.nat({ max: 255 }), { minLength: 11, maxLength: 11 }),
      }),
    ),
  }),
  fc.record({
    kind: fc.constant('pax' as const),
    seed: fc.constant(2),
    variant: fc.constantFrom('record-length' as const, 'header-size' as const),
    digits: fc.constantFrom('99999999999', '77777777777', '00000000000', '4194305', '999999999999999999999', '1'),
  }),
  fc.record({
    kind: fc.constant('name' as const),
    seed: seedIndex,
    header: fc.nat({ max: 8 }),
    bytes: fc.oneof(
      fc.array(fc.integer({ min: 0x80, max: 0xff }), { minLength: 1, maxLength: 100 }),
      fc.array(fc.nat({ max: 255 }), { minLength: 1, maxLength: 100 }),
      fc.constant(Array(100).fill(0x6e)),
    ),
  }),
);

/**
 * What an archive puts on disk, by normalized path: files by content hash (a hard link as its
 * target's content), symlinks by target, directories (implicit parents included). `strip`
 * leading components are dropped (a download is named after the directory it was made of).
 */
async function contentOf(archive: Buffer, strip = 0): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  extract.on('entry', (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: unknown) => void chunks.push(c as Buffer));
    stream.on('error', () => undefined);
    stream.on('end', () => {
      const parts = posix
        .normalize(header.name)
        .split('/')
        .filter((p) => p !== '' && p !== '.')
        .slice(strip);
      if (parts.length > 0) {
        for (let i = 1; i < parts.length; i++) if (!out.has(parts.slice(0, i).join('/'))) out.set(parts.slice(0, i).join('/'), 'directory');
        const name = parts.join('/');
        if (header.type === 'directory') out.set(name, 'directory');
        else if (header.type === 'symlink') out.set(name, `symlink:${header.linkname}`);
        else if (header.type === 'link')
          out.set(
            name,
            out.get(
              posix
                .normalize(header.linkname ?? '')
                .split('/')
                .filter((p) => p !== '' && p !== '.')
                .slice(strip)
                .join('/'),
            ) ?? 'link:?',
          );
        else out.set(name, `file:${sha(Buffer.concat(chunks))}`);
      }
      next();
    });
  });
  extract.end(archive);
  await done;
  return out;
}

const figures = {
  sent: 0,
  byCode: {} as Record<string, number>,
  rssBeforeBytes: 0,
  rssAfterBytes: 0,
  heapBeforeBytes: 0,
  heapAfterBytes: 0,
  startedMs: 0,
};

async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

async function heapOf(): Promise<number> {
  const text = await (await fetch(`${plane.client.baseUrl}/metrics`)).text();
  return Number(/^sbx_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1] ?? NaN);
}

async function exec(cmd: string): Promise<string> {
  return ((await plane.client.submitCall(leaseId, 'exec', { cmd }, { waitSeconds: 60 })) as ToolResult).stdout ?? '';
}

/**
 * Sends a batch, each archive into `<dir>/<i>` (a fresh `dir` per batch), `CONCURRENCY` at a time;
 * checks every answer, then that the process is up and that the sandbox holds exactly the
 * accepted archives and nothing of the rejected ones.
 */
async function sendBatch(dir: string, batch: Mutation[]): Promise<void> {
  const archives = batch.map(apply);
  const accepted = new Map<number, Buffer>();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < archives.length; i = next++) {
      const response = await fetch(`${plane.client.baseUrl}/v1/sandboxes/${leaseId}/files?path=${dir}/${i}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${identity.apiKey}`, 'content-type': 'application/x-tar' },
        body: archives[i],
      });
      const body: unknown = await response.json();
      figures.sent += 1;
      const what = `${JSON.stringify(batch[i])} -> ${response.status} ${JSON.stringify(body).slice(0, 300)}`;
      if (response.status === 200) {
        figures.byCode['200'] = (figures.byCode['200'] ?? 0) + 1;
        accepted.set(i, archives[i]!);
        continue;
      }
      expect(response.status >= 400 && response.status < 500, what).toBe(true);
      const parsed = ErrorBody.safeParse(body);
      expect(parsed.success, what).toBe(true);
      const { code, domain } = parsed.data!.error;
      expect(ERROR_CODES[code].status, what).toBe(response.status);
      expect(code.startsWith(`${domain}.`), what).toBe(true);
      figures.byCode[`${response.status} ${code}`] = (figures.byCode[`${response.status} ${code}`] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  expect((await fetch(`${plane.client.baseUrl}/healthz`)).status).toBe(200);
  expect(plane.child.exitCode).toBeNull();
  const listed = (await exec(`ls -A ${dir} 2>/dev/null; ls -A /workspace | grep -c '^.sbx-upload' || true`)).trim().split('\n');
  expect(listed.pop(), 'a staging directory was left behind').toBe('0');
  expect(
    listed
      .filter(Boolean)
      .map(Number)
      .sort((a, b) => a - b),
  ).toEqual([...accepted.keys()].sort((a, b) => a - b));
  if (accepted.size === 0) return;
  const download = await fetch(`${plane.client.baseUrl}/v1/sandboxes/${leaseId}/files?path=${dir}`, {
    headers: { authorization: `Bearer ${identity.apiKey}` },
  });
  expect(download.status).toBe(200);
  const inSandbox = await contentOf(Buffer.from(await download.arrayBuffer()), 1);
  for (const [i, archive] of accepted) {
    const expected = await contentOf(archive);
    const actual = new Map([...inSandbox].filter(([p]) => p.startsWith(`${i}/`)).map(([p, v]) => [p.slice(`${i}/`.length), v]));
    expect(actual, JSON.stringify(batch[i])).toEqual(expected);
  }
}

describe('archive fuzzing of PUT /v1/sandboxes/:id/files', () => {
  it(
    'at least 2,000 mutated archives: 4xx in the documented shape or exactly the archive written; the process stays up with bounded memory',
    { timeout: 600_000 },
    async () => {
      seeds = await Promise.all(SEED_ENTRIES.map((entries) => tarBytes(entries)));
      figures.startedMs = Date.now();
      // Warm-up (first upload, JIT), then the baseline.
      await sendBatch(
        '/workspace/fuzz-warm',
        seeds.map((_, seed) => ({ kind: 'truncate', seed, at: seeds[seed]!.length })),
      );
      figures.rssBeforeBytes = await rssOf(plane.child.pid!);
      figures.heapBeforeBytes = await heapOf();

      // Every 512-byte boundary of every seed, and cuts inside each header (name, size, checksum, typeflag, magic).
      const truncations: Mutation[] = [];
      seeds.forEach((archive, seed) => {
        for (let at = 0; at <= archive.length; at += BLOCK) truncations.push({ kind: 'truncate', seed, at });
        for (const h of headerOffsets(archive))
          for (const inside of [1, 100, 130, 150, 156, 257, 511]) truncations.push({ kind: 'truncate', seed, at: h + inside });
      });
      for (let i = 0; i < truncations.length; i += BATCH)
        await sendBatch(`/workspace/fuzz-cut-${i / BATCH}`, truncations.slice(i, i + BATCH));

      let run = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(mutation, { minLength: BATCH, maxLength: BATCH }), async (batch) => {
          await sendBatch(`/workspace/fuzz-${run++}`, batch);
        }),
        { numRuns: FAST_CHECK_RUNS, seed: FAST_CHECK_SEED, endOnFailure: true },
      );

      figures.rssAfterBytes = await rssOf(plane.child.pid!);
      figures.heapAfterBytes = await heapOf();
      const seconds = ((Date.now() - figures.startedMs) / 1000).toFixed(1);
      console.log(
        `[fuzz] seed ${FAST_CHECK_SEED}: ${figures.sent} archives in ${seconds} s; answers ${JSON.stringify(figures.byCode)}; RSS ${figures.rssBeforeBytes >> 20} -> ${figures.rssAfterBytes >> 20} MiB; heap ${figures.heapBeforeBytes >> 20} -> ${figures.heapAfterBytes >> 20} MiB`,
      );
      expect(figures.sent).toBeGreaterThanOrEqual(2000);
      // Generous: the bodies are small, so a leak of anything per request shows as far more.
      expect(figures.rssAfterBytes).toBeLessThan(figures.rssBeforeBytes + 200 * 1024 * 1024);
      expect(figures.heapAfterBytes).toBeLessThan(figures.heapBeforeBytes + 100 * 1024 * 1024);
    },
  );
});
