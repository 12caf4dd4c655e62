/**
 * The one lock primitive: a Redis key holding its holder's token, with a time to live. Taken
 * with SET NX; renewed, released and stolen only by compare-and-swap on the holder, so a holder
 * that lost its lock (it expired, another took it) can never extend or free someone else's.
 * Used for the returns consumer lock of each lease (agent-link/) and the filler lock of each
 * warm pool (pools/).
 */
import type { Redis } from 'ioredis';

const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
/** Takes a lock from a holder known to be dead: only if it is still the holder read. */
const STEAL = `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0`;

export class RedisLock {
  constructor(private readonly redis: Redis) {}

  /** Takes `key` for `holder` for `ttlMs` unless someone holds it. True when taken. */
  async acquire(key: string, holder: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(key, holder, 'PX', ttlMs, 'NX')) === 'OK';
  }

  /** Extends `holder`'s lock to `ttlMs` from now. False when `holder` does not hold it (any more). */
  async renew(key: string, holder: string, ttlMs: number): Promise<boolean> {
    return ((await this.redis.eval(RENEW, 1, key, holder, ttlMs)) as number) === 1;
  }

  /** Takes the lock, or renews it when `holder` has it already. True when `holder` holds it now. */
  async hold(key: string, holder: string, ttlMs: number): Promise<boolean> {
    return (await this.acquire(key, holder, ttlMs)) || (await this.renew(key, holder, ttlMs));
  }

  /** Frees `holder`'s lock (a lock someone else holds now is left alone). */
  async release(key: string, holder: string): Promise<void> {
    await this.redis.eval(RELEASE, 1, key, holder);
  }

  /** Moves the lock from `from` (known to be dead) to `to` for `ttlMs`, if `from` still holds it. */
  async steal(key: string, from: string, to: string, ttlMs: number): Promise<boolean> {
    return ((await this.redis.eval(STEAL, 1, key, from, to, ttlMs)) as number) === 1;
  }

  /** The current holder, or null. */
  holder(key: string): Promise<string | null> {
    return this.redis.get(key);
  }

  /** Whether anyone holds `key`. */
  async held(key: string): Promise<boolean> {
    return (await this.redis.exists(key)) === 1;
  }
}
