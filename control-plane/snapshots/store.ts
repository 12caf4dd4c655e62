/**
 * Snapshot records in Redis: `<prefix>snapshots` (hash: id → record JSON). Few per tenant, so
 * listings and the byte count read the whole hash.
 *
 * The byte quota is held atomically: a capture first reserves an estimate of its bytes
 * (`<prefix>snapshot-reservations`, hash: id → `{tenant, bytes, expiresAtMs}`), and its record
 * is written only if the tenant's records, its other live reservations and the record's own
 * bytes still fit; each step is one Lua script, so two captures near the quota can never both
 * be kept. A reservation left by a control plane that died mid-capture stops counting at its
 * `expiresAtMs` (and is dropped by the next script that sees it).
 */
import type { Redis } from 'ioredis';
import { SnapshotRecord } from './schema.js';

/**
 * Lua: the bytes `ARGV[1]` (tenant) holds, snapshot records (KEYS[1]) plus live reservations
 * (KEYS[2]) other than `ARGV[2]`, at time `ARGV[3]` (ms); expired reservations are dropped.
 */
const USED = `
local function used(tenant, except, now)
  local total = 0
  for _, text in ipairs(redis.call('HVALS', KEYS[1])) do
    local r = cjson.decode(text)
    if r.tenant == tenant then total = total + tonumber(r.sizeBytes) end
  end
  local res = redis.call('HGETALL', KEYS[2])
  for i = 1, #res, 2 do
    local r = cjson.decode(res[i + 1])
    if tonumber(r.expiresAtMs) <= now then
      redis.call('HDEL', KEYS[2], res[i])
    elseif r.tenant == tenant and res[i] ~= except then
      total = total + tonumber(r.bytes)
    end
  end
  return total
end
`;

/** ARGV: tenant, id, now ms, bytes, quota, expiresAtMs. Returns -1 when reserved, else the bytes used. */
const RESERVE = `${USED}
local total = used(ARGV[1], ARGV[2], tonumber(ARGV[3]))
if total + tonumber(ARGV[4]) > tonumber(ARGV[5]) then return total end
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode({tenant = ARGV[1], bytes = tonumber(ARGV[4]), expiresAtMs = tonumber(ARGV[6])}))
return -1`;

/** ARGV: tenant, id, now ms, record JSON, its bytes, quota. Returns -1 when written (reservation dropped), else the bytes used. */
const PUT_WITHIN = `${USED}
local total = used(ARGV[1], ARGV[2], tonumber(ARGV[3]))
if total + tonumber(ARGV[5]) > tonumber(ARGV[6]) then return total end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
redis.call('HDEL', KEYS[2], ARGV[2])
return -1`;

export class SnapshotStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key = (): string => `${this.prefix}snapshots`;
  private reservations = (): string => `${this.prefix}snapshot-reservations`;

  /**
   * Reserves `bytes` of `tenant`'s snapshot quota for capture `id` until `expiresAtMs`, if its
   * records, its other live reservations and `bytes` fit `quotaBytes`. Returns null when
   * reserved, else the bytes the tenant already holds (nothing reserved).
   */
  async reserve(id: string, tenant: string, bytes: number, quotaBytes: number, nowMs: number, expiresAtMs: number): Promise<number | null> {
    const answer = Number(
      await this.redis.eval(RESERVE, 2, this.key(), this.reservations(), tenant, id, nowMs, bytes, quotaBytes, expiresAtMs),
    );
    return answer < 0 ? null : answer;
  }

  /**
   * Writes `record` and drops its reservation, if the tenant's records, its other live
   * reservations and `record.sizeBytes` fit `quotaBytes`. Returns null when written, else the
   * bytes the tenant holds besides this capture (nothing written, the reservation kept).
   */
  async putWithinQuota(record: SnapshotRecord, quotaBytes: number, nowMs: number): Promise<number | null> {
    const answer = Number(
      await this.redis.eval(
        PUT_WITHIN,
        2,
        this.key(),
        this.reservations(),
        record.tenant,
        record.id,
        nowMs,
        JSON.stringify(record),
        record.sizeBytes,
        quotaBytes,
      ),
    );
    return answer < 0 ? null : answer;
  }

  /** Drops capture `id`'s reservation (absent is fine). */
  async release(id: string): Promise<void> {
    await this.redis.hdel(this.reservations(), id);
  }

  async get(id: string): Promise<SnapshotRecord | null> {
    const text = await this.redis.hget(this.key(), id);
    return text === null ? null : SnapshotRecord.parse(JSON.parse(text));
  }

  /** Every record (all tenants), oldest first. */
  async list(): Promise<SnapshotRecord[]> {
    const all = (await this.redis.hvals(this.key())).map((t) => SnapshotRecord.parse(JSON.parse(t)));
    return all.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** Forgets a record; true when it existed. */
  async delete(id: string): Promise<boolean> {
    return (await this.redis.hdel(this.key(), id)) === 1;
  }
}
