/**
 * The artifact store (control-plane/artifacts/store.ts) receiving a stream, on the real Redis and
 * a real directory: the bytes are checked as they arrive and only a whole, matching copy becomes
 * the artifact; two receives of one artifact at once (a fetch made again while the first still
 * ran) never write into each other; whatever fails leaves no part file and no record.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../contract/errors.js';
import { ArtifactRecords, ArtifactStore } from '../control-plane/artifacts/store.js';
import { loadConfig } from '../control-plane/config.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import { REPO_ROOT, scratchDir, testIdentity } from './fixtures/index.js';

const { prefix } = testIdentity('artifact-store');
let redis: Redis;

beforeAll(() => {
  redis = connectRedis(redisOptions(loadConfig(process.env, REPO_ROOT).redis));
});

afterAll(async () => {
  const left = await redis.keys(`${prefix}*`);
  if (left.length > 0) await redis.del(...left);
  redis?.disconnect();
});

/** A store in a scratch directory of the running test, its records under the test's prefix. */
async function newStore(): Promise<{ store: ArtifactStore; records: ArtifactRecords; dir: string }> {
  const dir = await scratchDir('sbx-artifact-store-');
  const records = new ArtifactRecords(redis, prefix);
  return { store: new ArtifactStore(dir, records), records, dir };
}

/**
 * `bytes` as a stream of 64 KiB pieces, each on its own turn of the event loop (as a tunnel
 * delivers them); with `failAfter`, destroyed with an error instead of that piece.
 */
function piecesOf(bytes: Buffer, failAfter = Infinity): Readable {
  let at = 0;
  let pieces = 0;
  return new Readable({
    read() {
      setImmediate(() => {
        if (pieces++ === failAfter) this.destroy(new Error('the tunnel broke'));
        else this.push(at < bytes.length ? bytes.subarray(at, (at += 64 * 1024)) : null);
      });
    },
  });
}

function metaOf(bytes: Buffer) {
  return {
    id: `art_${randomBytes(8).toString('hex')}`,
    leaseId: 'sbx_artifactstoretest0000',
    callId: 'call_1',
    name: 'stdout',
    mediaType: 'application/octet-stream',
    size: bytes.length,
    sha256: createHash('sha256').update(bytes).digest('hex'),
  };
}

describe('ArtifactStore.receive', () => {
  it('two receives of one artifact at once both store it whole: one copy becomes the artifact, no part file stays', async () => {
    const { store, records, dir } = await newStore();
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    const meta = metaOf(bytes);
    const [a, b] = await Promise.all([store.receive(meta, piecesOf(bytes)), store.receive(meta, piecesOf(bytes))]);
    expect([a.size, a.sha256, b.sha256]).toEqual([bytes.length, meta.sha256, meta.sha256]);
    expect((await readFile(join(dir, meta.id))).equals(bytes)).toBe(true);
    expect(await readdir(dir)).toEqual([meta.id]);
    expect((await records.get(meta.id))?.sha256).toBe(meta.sha256);
  });

  it('bytes that are not the announced ones are artifact.corrupt: nothing recorded, no file left', async () => {
    const { store, records, dir } = await newStore();
    const bytes = randomBytes(200_000);
    const meta = metaOf(bytes);
    const flipped = Buffer.from(bytes);
    flipped[100_000] = flipped[100_000]! ^ 1;
    const err = await store.receive(meta, piecesOf(flipped)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('artifact.corrupt');
    expect(await readdir(dir)).toEqual([]);
    expect(await records.get(meta.id)).toBeNull();
  });

  it('a source that fails midway fails the receive with its error: nothing recorded, no file left', async () => {
    const { store, records, dir } = await newStore();
    const bytes = randomBytes(500_000);
    const meta = metaOf(bytes);
    await expect(store.receive(meta, piecesOf(bytes, 3))).rejects.toThrow('the tunnel broke');
    expect(await readdir(dir)).toEqual([]);
    expect(await records.get(meta.id)).toBeNull();
  });
});
