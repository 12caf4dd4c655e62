/**
 * The terminals counted against a sandbox's `terminals.max`: per sandbox, the set of terminal ids
 * holding a place. Taking a place is one Lua script (count and add at once), so concurrent creates
 * cannot pass the limit; a place is given back when its terminal ends or its start failed.
 */
import type { Redis } from 'ioredis';

const RESERVE = `
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1`;

export class TerminalSlots {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key(leaseId: string): string {
    return `${this.prefix}terminals-live:${leaseId}`;
  }

  /** Takes a place for `terminalId` unless `max` are taken (false). Taking one held already is true. */
  async reserve(leaseId: string, terminalId: string, max: number): Promise<boolean> {
    return (await this.redis.eval(RESERVE, 1, this.key(leaseId), terminalId, String(max))) === 1;
  }

  /** Gives `terminalId`'s place back; absent is success. */
  async release(leaseId: string, terminalId: string): Promise<void> {
    await this.redis.srem(this.key(leaseId), terminalId);
  }

  /** The terminals holding a place. */
  async held(leaseId: string): Promise<string[]> {
    return this.redis.smembers(this.key(leaseId));
  }
}
