/**
 * The preview log's gathered writes (control-plane/previews/store.ts) against the real Redis:
 * appends of one window go to Redis as one script call, in order; a read in the same process
 * sees every append made before it; `close` writes what is left; the oldest past
 * PREVIEW_LOG_MAX go and are counted, also when one write carries many; a read during a long
 * write sees it whole and in order; entries logged after the lease ended keep its retention.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PreviewEvent } from '../contract/previews.js';
import { loadConfig } from '../control-plane/config.js';
import { PREVIEW_LOG_MAX, PreviewLog } from '../control-plane/previews/store.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import { REPO_ROOT, testIdentity } from './fixtures/index.js';

const { prefix } = testIdentity('preview-log');
let redis: Redis;
/** Script calls `redis` sent (each a write of the log). */
let evals = 0;

beforeAll(() => {
  redis = connectRedis(redisOptions(loadConfig(process.env, REPO_ROOT).redis));
  const evaluate = redis.eval.bind(redis);
  redis.eval = ((...args: Parameters<typeof redis.eval>) => {
    evals += 1;
    return evaluate(...args);
  }) as typeof redis.eval;
});

afterAll(async () => {
  const left = await redis.keys(`${prefix}*`);
  if (left.length > 0) await redis.del(...left);
  redis?.disconnect();
});

/** A preview event whose path numbers it. */
function event(n: number): PreviewEvent {
  return {
    at: new Date(0).toISOString(),
    port: 8000,
    via: 'api',
    keyId: 'bootstrap',
    tenant: 'default',
    kind: 'http',
    method: 'GET',
    path: `/${n}`,
    status: 200,
    outcome: 'completed',
    bytesToSandbox: 10,
    bytesFromSandbox: 20,
    durationMs: 1,
    error: null,
  };
}

const paths = (events: PreviewEvent[]): string[] => events.map((e) => e.path);
const numbered = (from: number, count: number): string[] => Array.from({ length: count }, (_, i) => `/${from + i}`);

describe('preview log', () => {
  it('appends of one window are one script call, in order, and each resolves once written', async () => {
    const log = new PreviewLog(redis, prefix);
    const before = evals;
    await Promise.all(Array.from({ length: 50 }, (_, i) => log.append('sbx_window', event(i))));
    expect(evals - before).toBe(1);
    expect(await redis.lrange(`${prefix}previews:sbx_window`, 0, -1)).toHaveLength(50);
    expect(paths((await log.read('sbx_window', 100)).events)).toEqual(numbered(0, 50));
  });

  it('a read in the same process sees every append made before it, without waiting for the window', async () => {
    const log = new PreviewLog(redis, prefix);
    const appended = [log.append('sbx_read', event(1)), log.append('sbx_read', event(2)), log.append('sbx_other', event(3))];
    expect(paths((await log.read('sbx_read', 10)).events)).toEqual(['/1', '/2']);
    await Promise.all(appended);
    expect(paths((await log.read('sbx_other', 10)).events)).toEqual(['/3']);
  });

  it('close writes what is gathered', async () => {
    const log = new PreviewLog(redis, prefix);
    void log.append('sbx_close', event(7));
    await log.close();
    expect(await redis.lrange(`${prefix}previews:sbx_close`, 0, -1)).toHaveLength(1);
  });

  it('a read during a write of more than a script call carries sees it all, in order', async () => {
    const log = new PreviewLog(redis, prefix);
    const first = Array.from({ length: 2500 }, (_, i) => log.append('sbx_order', event(i)));
    // The write begins (three scripts); more appends and a read come before it answered.
    const writing = log.close();
    const more = Array.from({ length: 10 }, (_, i) => log.append('sbx_order', event(2500 + i)));
    const read = await log.read('sbx_order', PREVIEW_LOG_MAX);
    expect(paths(read.events)).toEqual(numbered(0, 2510));
    await Promise.all([...first, ...more, writing]);
  });

  it('entries written after the lease ended keep its retention', async () => {
    const log = new PreviewLog(redis, prefix);
    await log.retain('sbx_ended', 60);
    await log.append('sbx_late', event(0));
    expect(await redis.ttl(`${prefix}previews:sbx_late`)).toBe(-1);
    await log.append('sbx_ended', event(1));
    const ttl = await redis.ttl(`${prefix}previews:sbx_ended`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60);
  });

  it('a window of more than a script call carries is written whole and in order; past PREVIEW_LOG_MAX the oldest go, counted', async () => {
    const log = new PreviewLog(redis, prefix);
    const count = PREVIEW_LOG_MAX + 2500;
    const before = evals;
    await Promise.all(Array.from({ length: count }, (_, i) => log.append('sbx_many', event(i))));
    expect(evals - before).toBeGreaterThan(1);
    const { events, dropped } = await log.read('sbx_many', PREVIEW_LOG_MAX);
    expect(dropped).toBe(2500);
    expect(paths(events)).toEqual(numbered(2500, PREVIEW_LOG_MAX));
  });
});
