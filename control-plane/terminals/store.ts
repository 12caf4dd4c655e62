/**
 * The terminals counted against a sandbox's `terminals.max`: one Redis sorted set per lease (score: when the place was taken), in the
 * lease's namespace (so it goes with the lease, `AgentLink.destroy`). A place is taken by one Lua
 * script before the terminal's call is submitted, so creates at once — on one control plane or
 * several — cannot all see room for themselves and start more than the policy allows.
 */
import type { Redis } from 'ioredis';
import { leaseKeys } from '../../contract/queue.js';

const RESERVE = `
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1`;

/** A terminal counted as open: its id and when its place was taken (ms since the epoch). */
export interface TerminalSlot {
  terminalId: string;
  reservedAtMs: number;
}

export class TerminalSlots {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  private key(leaseId: string): string {
    return `${leaseKeys(this.rootPrefix, leaseId).namespace}:terminals-live`;
  }

  /** Counts `terminalId` as open, reserved at `nowMs`, unless `max` are open already (false). */
  async reserve(leaseId: string, terminalId: string, max: number, nowMs: number): Promise<boolean> {
    return (await this.redis.eval(RESERVE, 1, this.key(leaseId), terminalId, String(max), String(nowMs))) === 1;
  }

  /** Stops counting `terminalId` (it ended, or never started). */
  async release(leaseId: string, terminalId: string): Promise<void> {
    await this.redis.zrem(this.key(leaseId), terminalId);
  }

  /** The terminals counted as open. */
  async live(leaseId: string): Promise<TerminalSlot[]> {
    const flat = await this.redis.zrange(this.key(leaseId), 0, -1, 'WITHSCORES');
    const slots: TerminalSlot[] = [];
    for (let i = 0; i < flat.length; i += 2) slots.push({ terminalId: flat[i]!, reservedAtMs: Number(flat[i + 1]) });
    return slots;
  }
}
