/**
 * The terminals counted against a sandbox's `terminals.max`: one Redis set per lease, in the
 * lease's namespace (so it goes with the lease, `AgentLink.destroy`). A place is taken by one Lua
 * script before the terminal's call is submitted, so creates at once — on one control plane or
 * several — cannot all see room for themselves and start more than the policy allows.
 */
import type { Redis } from 'ioredis';
import { leaseKeys } from '../../contract/queue.js';

const RESERVE = `
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1`;

export class TerminalSlots {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  private key(leaseId: string): string {
    return `${leaseKeys(this.rootPrefix, leaseId).namespace}:terminals-live`;
  }

  /** Counts `terminalId` as open unless `max` are open already (false). */
  async reserve(leaseId: string, terminalId: string, max: number): Promise<boolean> {
    return (await this.redis.eval(RESERVE, 1, this.key(leaseId), terminalId, String(max))) === 1;
  }

  /** Stops counting `terminalId` (it ended, or never started). */
  async release(leaseId: string, terminalId: string): Promise<void> {
    await this.redis.srem(this.key(leaseId), terminalId);
  }

  /** The terminals counted as open. */
  liveIds(leaseId: string): Promise<string[]> {
    return this.redis.smembers(this.key(leaseId));
  }
}
