/**
 * The tracked lease-record cache (control-plane/redis/tracked-keys.ts) against the real Redis:
 * reads are served from the process while Redis says nothing changed, a change by another
 * connection is seen once Redis's invalidation arrives, and with the tracking connection cut
 * nothing stale is served.
 */
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../control-plane/config.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import { TrackedKeys } from '../control-plane/redis/tracked-keys.js';
import { REPO_ROOT, eventually, testIdentity } from './fixtures/index.js';

const { prefix } = testIdentity('tracked');
const tracked = `${prefix}leases:`;
let reader: Redis;
let writer: Redis;
let keys: TrackedKeys;
/** Below the cache's own 1 s bound on a value's age: a change seen sooner was seen by its invalidation. */
const INVALIDATED_WITHIN_MS = 900;
/** GETs `reader` sent to Redis. */
let gets = 0;

beforeAll(async () => {
  const options = redisOptions(loadConfig(process.env, REPO_ROOT).redis);
  reader = connectRedis(options);
  writer = connectRedis(options);
  const get = reader.get.bind(reader);
  reader.get = ((key: string) => {
    gets += 1;
    return get(key);
  }) as typeof reader.get;
  keys = await TrackedKeys.start(reader, [tracked], pino({ level: 'silent' }));
});

afterAll(async () => {
  keys?.close();
  const left = await writer.keys(`${prefix}*`);
  if (left.length > 0) await writer.del(...left);
  reader?.disconnect();
  writer?.disconnect();
});

/** How many GETs `read` sent. */
async function getsOf(read: () => Promise<unknown>): Promise<number> {
  const before = gets;
  await read();
  return gets - before;
}

describe('tracked keys (client-side caching with Redis invalidations)', () => {
  it('a tracked key is read from Redis once while nothing changes it; a write or delete by another connection is seen after its invalidation', async () => {
    expect(keys.active).toBe(true);
    const key = `${tracked}a`;
    await writer.set(key, 'v1');
    expect(await keys.get(key)).toBe('v1');
    expect(await getsOf(() => keys.get(key))).toBe(0);
    await writer.set(key, 'v2');
    await eventually(
      () => keys.get(key),
      (v) => v === 'v2',
      INVALIDATED_WITHIN_MS,
    );
    expect(await getsOf(() => keys.get(key))).toBe(0);
    await writer.del(key);
    await eventually(
      () => keys.get(key),
      (v) => v === null,
      INVALIDATED_WITHIN_MS,
    );
  });

  it('a key outside the tracked prefixes is read from Redis every time', async () => {
    const key = `${prefix}other:a`;
    await writer.set(key, 'x');
    expect(await getsOf(() => keys.get(key))).toBe(1);
    expect(await getsOf(() => keys.get(key))).toBe(1);
  });

  it('forget drops a key this process wrote before the invalidation arrives', async () => {
    const key = `${tracked}b`;
    await writer.set(key, 'v1');
    await keys.get(key);
    await writer.set(key, 'v2');
    keys.forget(key);
    expect(await keys.get(key)).toBe('v2');
  });

  it('with the tracking connection cut, a change is seen all the same; tracking comes back by itself', async () => {
    const key = `${tracked}c`;
    await writer.set(key, 'v1');
    await keys.get(key);
    const connections = keys.trackedConnections;
    const line = ((await writer.client('LIST')) as string).split('\n').find((l) => l.includes(`name=${keys.connectionName} `));
    const id = /\bid=(\d+)/.exec(line ?? '')?.[1];
    expect(id, 'the tracking connection is in CLIENT LIST').toBeDefined();
    await writer.client('KILL', 'ID', id!);
    // No invalidation reaches this process for this write (its tracking connection is gone):
    // the cache is dropped with the connection, so the new value is read well before the 1 s bound.
    await writer.set(key, 'v2');
    await eventually(
      () => keys.get(key),
      (v) => v === 'v2',
      INVALIDATED_WITHIN_MS,
    );
    await eventually(
      async () => keys.trackedConnections,
      (n) => n > connections,
    );
    // Tracked again on the new connection: a value read now is cached, and a change invalidates it.
    await eventually(
      async () => keys.active && (await keys.get(key)) === 'v2' && (await getsOf(() => keys.get(key))) === 0,
      (cached) => cached,
    );
    await writer.set(key, 'v3');
    await eventually(
      () => keys.get(key),
      (v) => v === 'v3',
      INVALIDATED_WITHIN_MS,
    );
    expect(await getsOf(() => keys.get(key))).toBe(0);
  });
});
