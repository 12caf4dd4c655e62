/**
 * The return path's consumer (control-plane/agent-link/returns-in.ts) against the real Redis,
 * with entries appended as an agent appends them (`encodeReturn`, XADD): messages reach the
 * handler in stream order and leave the stream once handled; a chunk's bytes arrive raw; a
 * malformed entry and one the ledger refuses are dropped, a failing handler is retried and
 * holds back what follows; a lease started while the reader waits is read at once, and one
 * with more entries than the read-ahead is read to the end; a consumer that stopped leaves
 * what it did not handle to the next. The reader's block time is set to a minute, so no
 * step depends on a read timing out.
 */
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { AppError } from '../contract/errors.js';
import { encodeReturn, leaseKeys, type ReturnMessage } from '../contract/queue.js';
import { Liveness } from '../control-plane/agent-link/liveness.js';
import { ReturnsIn } from '../control-plane/agent-link/returns-in.js';
import type { Redis } from '../control-plane/redis/connections.js';
import { RedisLock } from '../control-plane/redis/lock.js';
import { eventually, testIdentity, useRedisPrefix } from './fixtures/index.js';

const { prefix } = testIdentity('returns-in');
const shared = useRedisPrefix(prefix);
const options = shared.options;
let redis: Redis;

beforeAll(() => {
  redis = shared.redis();
});

/** A consumer of this test's prefix, as a live process of its own, whose handler is `handler`; closed after the test. */
async function consumer(handler: (leaseId: string, message: ReturnMessage) => Promise<void>): Promise<ReturnsIn> {
  const log = pino({ level: 'silent' });
  const liveness = new Liveness(redis, prefix, log);
  await liveness.start();
  const c = new ReturnsIn(redis, options, prefix, new RedisLock(redis), liveness, handler, log, { blockMs: 60_000 });
  onTestFinished(async () => {
    await c.close();
    await liveness.close();
  });
  return c;
}

function newLease(): string {
  return `sbx_${randomBytes(10).toString('hex')}`;
}

/** Appends `message` to the lease's return stream as the agent does. */
async function append(leaseId: string, message: ReturnMessage): Promise<void> {
  await redis.xadd(leaseKeys(prefix, leaseId).returns, '*', ...encodeReturn(message));
}

function event(n: number): ReturnMessage {
  return {
    kind: 'event',
    callId: 'call_1',
    attemptId: 'att_1',
    n,
    body: { type: 'output', stream: 'stdout', offset: n, dataBase64: 'eA==' },
  };
}

const streamLength = (leaseId: string): Promise<number> => redis.xlen(leaseKeys(prefix, leaseId).returns);

describe('the return stream consumer', () => {
  it('hands messages on in stream order, deletes each once handled, and carries a chunk’s bytes raw', async () => {
    const lease = newLease();
    const seen: ReturnMessage[] = [];
    const c = await consumer(async (_id, m) => void seen.push(m));
    const bytes = randomBytes(70_000);
    await append(lease, event(1));
    await append(lease, { kind: 'artifact_chunk', callId: 'call_1', artifactId: 'art_abcdefgh', index: 0, sha256: 'x', data: bytes });
    await append(lease, event(2));
    expect(await c.start(lease)).toBe(true);
    await eventually(
      async () => seen.length,
      (n) => n === 3,
    );
    expect(seen.map((m) => m.kind)).toEqual(['event', 'artifact_chunk', 'event']);
    const chunk = seen[1] as Extract<ReturnMessage, { kind: 'artifact_chunk' }>;
    expect(Buffer.compare(chunk.data, bytes)).toBe(0);
    await c.drain(lease, 10_000);
    expect(await streamLength(lease)).toBe(0);
  });

  it('drops a malformed entry and one the ledger refuses with an AppError; retries any other failure, holding back what follows', async () => {
    const lease = newLease();
    const seen: number[] = [];
    let failuresLeft = 3;
    const c = await consumer(async (_id, m) => {
      if (m.kind !== 'event') return;
      if (m.n === 2) throw new AppError('artifact.corrupt', 'refused');
      if (m.n === 3 && failuresLeft-- > 0) throw new Error('ECONNRESET');
      seen.push(m.n);
    });
    await c.start(lease);
    await redis.xadd(leaseKeys(prefix, lease).returns, '*', 'm', '{not json');
    await redis.xadd(leaseKeys(prefix, lease).returns, '*', 'm', JSON.stringify({ kind: 'event', callId: 'c' }));
    for (const n of [1, 2, 3, 4]) await append(lease, event(n));
    await eventually(
      async () => seen.length,
      (n) => n === 3,
    );
    expect(seen).toEqual([1, 3, 4]);
    expect(failuresLeft).toBe(-1);
    await c.drain(lease, 10_000);
    expect(await streamLength(lease)).toBe(0);
  });

  it('reads a lease started while its reader waits, and a backlog past the read-ahead to the end, in order', async () => {
    const first = newLease();
    const second = newLease();
    const seen: string[] = [];
    const c = await consumer(async (id, m) => {
      if (m.kind === 'event') seen.push(`${id === first ? 'a' : 'b'}${m.n}`);
      // Slower than the appends below: the backlog outgrows the read-ahead.
      await new Promise((r) => setImmediate(r));
    });
    await c.start(first);
    await append(first, event(1));
    await eventually(
      async () => seen.length,
      (n) => n === 1,
    );
    // The reader waits now (a minute), on the first lease only.
    await c.start(second);
    const count = 300;
    const pipeline = redis.pipeline();
    for (let n = 1; n <= count; n += 1) pipeline.xadd(leaseKeys(prefix, second).returns, '*', ...encodeReturn(event(n)));
    await pipeline.exec();
    await eventually(
      async () => seen.length,
      (n) => n === count + 1,
    );
    expect(seen).toEqual(['a1', ...Array.from({ length: count }, (_, i) => `b${i + 1}`)]);
  });

  it('a lease another process consumes is not consumed; entries a stopped consumer left are handled by the next, from the start', async () => {
    const lease = newLease();
    const handledByFirst: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const first = await consumer(async (_id, m) => {
      if (m.kind !== 'event') return;
      handledByFirst.push(m.n);
      if (m.n === 1) await held;
    });
    expect(await first.start(lease)).toBe(true);
    const second = await consumer(async (_id, m) => void (m.kind === 'event' && handledBySecond.push(m.n)));
    const handledBySecond: number[] = [];
    expect(await second.start(lease)).toBe(false);
    for (const n of [1, 2, 3]) await append(lease, event(n));
    await eventually(
      async () => handledByFirst.length,
      (n) => n === 1,
    );
    // The first stops once its message in hand is handled; 2 and 3 stay in the stream.
    const stopping = first.stop(lease);
    release();
    await stopping;
    expect(handledByFirst).toEqual([1]);
    expect(await streamLength(lease)).toBe(2);
    expect(await second.start(lease)).toBe(true);
    await eventually(
      async () => handledBySecond.length,
      (n) => n === 2,
    );
    expect(handledBySecond).toEqual([2, 3]);
  });
  it('a lease whose return key its agent made a string stops being consumed; the other leases’ returns go on', async () => {
    const broken = newLease();
    const healthy = newLease();
    const seen: string[] = [];
    const c = await consumer(async (id, m) => void (m.kind === 'event' && seen.push(`${id === healthy ? 'h' : 'b'}${m.n}`)));
    await c.start(broken);
    await c.start(healthy);
    await redis.set(leaseKeys(prefix, broken).returns, 'not a stream');
    await append(healthy, event(1));
    await eventually(
      async () => seen,
      (s) => s.includes('h1'),
    );
    expect(c.active()).toEqual([healthy]);
  });
});
