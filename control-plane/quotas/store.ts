/**
 * The quotas domain's Redis adapter: configured limits per tenant, each tenant's usage counters,
 * and one reservation per lease that holds quota. Reserving checks the limits and counts the
 * lease in one Lua script, so concurrent creates cannot both take the last unit; releasing
 * removes the reservation and uncounts it in one script too, so a second release is a no-op.
 *
 * Keys (under the prefix): `quota:limits:<tenant>` (JSON), `quota:usage:<tenant>` (hash:
 * `sandboxes`, `milliCpus`, `memoryBytes`), `quota:reservations` (hash: lease id → JSON).
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { QuotaLimits } from './schema.js';

/** One lease's hold on its tenant's quota. CPUs are counted in thousandths so sums stay exact. */
export const Reservation = z.object({
  tenant: z.string(),
  milliCpus: z.number().int().min(0),
  memoryBytes: z.number().int().min(0),
  /** When it was taken, ms since the epoch. */
  atMs: z.number(),
});
export type Reservation = z.infer<typeof Reservation>;

/** Limits as the scripts take them: integers, -1 for none. */
export interface ScriptLimits {
  maxSandboxes: number;
  maxMilliCpus: number;
  maxMemoryBytes: number;
}

/** The usage field over its limit: its name, the limit and the use before this request. */
export interface Refusal {
  field: 'sandboxes' | 'milliCpus' | 'memoryBytes';
  limit: number;
  used: number;
}

// KEYS: usage, reservations. ARGV: lease id, reservation JSON, milliCpus, memoryBytes, then the
// limits in the order of the usage fields (-1: none). Returns {} when reserved (or already
// reserved: idempotent), else {field, limit, used} of the first limit it would exceed.
const RESERVE = `
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {} end
local fields = {'sandboxes', 'milliCpus', 'memoryBytes'}
local used = redis.call('HMGET', KEYS[1], unpack(fields))
local want = {1, tonumber(ARGV[3]), tonumber(ARGV[4])}
for i = 1, 3 do
  local limit = tonumber(ARGV[4 + i])
  local have = tonumber(used[i] or '0')
  if limit >= 0 and have + want[i] > limit then return {fields[i], tostring(limit), tostring(have)} end
end
for i = 1, 3 do redis.call('HINCRBY', KEYS[1], fields[i], want[i]) end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {}`;

// KEYS: usage, reservations. ARGV: lease id, the reservation JSON read before (it must be the
// one still there). Returns 1 when this call released it.
const RELEASE = `
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local r = cjson.decode(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'sandboxes', -1)
redis.call('HINCRBY', KEYS[1], 'milliCpus', -r.milliCpus)
redis.call('HINCRBY', KEYS[1], 'memoryBytes', -r.memoryBytes)
redis.call('HDEL', KEYS[2], ARGV[1])
return 1`;

export class RedisQuotaStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    limits: (tenant: string) => `${this.prefix}quota:limits:${tenant}`,
    usage: (tenant: string) => `${this.prefix}quota:usage:${tenant}`,
    reservations: () => `${this.prefix}quota:reservations`,
  };

  /** The limits an admin configured for `tenant`, or null. */
  async getLimits(tenant: string): Promise<QuotaLimits | null> {
    const text = await this.redis.get(this.k.limits(tenant));
    return text === null ? null : QuotaLimits.parse(JSON.parse(text));
  }

  async putLimits(tenant: string, limits: QuotaLimits): Promise<void> {
    await this.redis.set(this.k.limits(tenant), JSON.stringify(limits));
  }

  /** The tenant's usage counters (0 where none). */
  async usage(tenant: string): Promise<{ sandboxes: number; milliCpus: number; memoryBytes: number }> {
    const [sandboxes, milliCpus, memoryBytes] = await this.redis.hmget(this.k.usage(tenant), 'sandboxes', 'milliCpus', 'memoryBytes');
    return { sandboxes: Number(sandboxes ?? 0), milliCpus: Number(milliCpus ?? 0), memoryBytes: Number(memoryBytes ?? 0) };
  }

  /** Reserves for `leaseId` unless a limit would be exceeded; null when reserved (or it already was), else the refusal. */
  async reserve(leaseId: string, reservation: Reservation, limits: ScriptLimits): Promise<Refusal | null> {
    const answer = (await this.redis.eval(
      RESERVE,
      2,
      this.k.usage(reservation.tenant),
      this.k.reservations(),
      leaseId,
      JSON.stringify(reservation),
      reservation.milliCpus,
      reservation.memoryBytes,
      limits.maxSandboxes,
      limits.maxMilliCpus,
      limits.maxMemoryBytes,
    )) as string[];
    if (answer.length === 0) return null;
    return { field: answer[0] as Refusal['field'], limit: Number(answer[1]), used: Number(answer[2]) };
  }

  /** Releases `leaseId`'s reservation; false when it had none (released before, or never reserved). */
  async release(leaseId: string): Promise<boolean> {
    const text = await this.redis.hget(this.k.reservations(), leaseId);
    if (text === null) return false;
    const { tenant } = Reservation.parse(JSON.parse(text));
    return (await this.redis.eval(RELEASE, 2, this.k.usage(tenant), this.k.reservations(), leaseId, text)) === 1;
  }

  /** Every reservation, by lease id. */
  async reservations(): Promise<Map<string, Reservation>> {
    const all = await this.redis.hgetall(this.k.reservations());
    return new Map(Object.entries(all).map(([id, text]) => [id, Reservation.parse(JSON.parse(text))]));
  }
}
