/**
 * The control plane's side of a lease's file change log (contract/watch.ts): reads of the Redis
 * stream the agent appends to (`LeaseKeys.changes`, entry ids `<seq>-0`), blocking reads for
 * open watches, and the per-lease slots that bound open watches across every control-plane
 * process (a sorted set of watch ids scored by when each lapses unless renewed).
 */
import type { Redis } from 'ioredis';
import { leaseKeys } from '../../contract/queue.js';
import { CHANGE_FIELD, ChangeEntry } from '../../contract/watch.js';

/** What a read of the log found. */
export interface LogRead {
  /** Entries with `seq` > the cursor, in order (at most the count asked). */
  entries: ChangeEntry[];
  /** The oldest `seq` the log keeps, null when it is empty. */
  oldestSeq: number | null;
  /** The newest `seq`, 0 when the log is empty. */
  lastSeq: number;
}

const SLOTS_ACQUIRE = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) == false and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1`;

export class RedisChangeLog {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  private key(leaseId: string): string {
    return leaseKeys(this.rootPrefix, leaseId).changes;
  }

  private slotsKey(leaseId: string): string {
    return `${this.rootPrefix}watch-slots:${leaseId}`;
  }

  /** Entries after `afterSeq` (at most `count`), with the log's bounds. */
  async read(leaseId: string, afterSeq: number, count: number): Promise<LogRead> {
    const key = this.key(leaseId);
    const [entries, oldest, newest] = await Promise.all([
      this.redis.xrange(key, `${afterSeq + 1}-0`, '+', 'COUNT', count),
      this.redis.xrange(key, '-', '+', 'COUNT', 1),
      this.redis.xrevrange(key, '+', '-', 'COUNT', 1),
    ]);
    const parsed = entries.map(parseEntry).filter((e): e is ChangeEntry => e !== null);
    return { entries: parsed, oldestSeq: oldest[0] ? seqOf(oldest[0][0]) : null, lastSeq: newest[0] ? seqOf(newest[0][0]) : 0 };
  }

  /**
   * Waits up to `blockMs` for entries after `afterSeq` on `connection` (a connection of the
   * caller's own: XREAD BLOCK holds it). Resolves with what arrived, [] on timeout.
   */
  async waitAfter(connection: Redis, leaseId: string, afterSeq: number, blockMs: number): Promise<void> {
    await connection.xread('COUNT', 1, 'BLOCK', blockMs, 'STREAMS', this.key(leaseId), `${afterSeq}-0`);
  }

  /** A fresh connection for `waitAfter`, closed by the caller. */
  blockingConnection(): Redis {
    return this.redis.duplicate();
  }

  /**
   * Takes (or renews) watch slot `watchId` of the lease until `untilMs` (epoch ms); false when
   * `max` other slots are held. Slots past their time are dropped first.
   */
  async takeSlot(leaseId: string, watchId: string, max: number, nowMs: number, untilMs: number): Promise<boolean> {
    const taken = await this.redis.eval(SLOTS_ACQUIRE, 1, this.slotsKey(leaseId), nowMs, untilMs, watchId, max);
    return taken === 1;
  }

  /** Gives slot `watchId` back; absent is success. */
  async releaseSlot(leaseId: string, watchId: string): Promise<void> {
    await this.redis.zrem(this.slotsKey(leaseId), watchId);
  }

  /** Slots held now (unexpired). */
  async slotsHeld(leaseId: string, nowMs: number): Promise<number> {
    return this.redis.zcount(this.slotsKey(leaseId), `(${nowMs}`, '+inf');
  }
}

function seqOf(id: string): number {
  return Number(id.split('-')[0]);
}

/** An entry's JSON; null for one that is not a `ChangeEntry` (the agent wrote it; it is skipped, not trusted). */
function parseEntry([, fields]: [string, string[]]): ChangeEntry | null {
  try {
    const parsed = ChangeEntry.safeParse(JSON.parse(fields[fields.indexOf(CHANGE_FIELD) + 1] ?? 'null'));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
