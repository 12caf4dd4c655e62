/**
 * The volumes domain's Redis adapter: volume records per tenant, the bytes each tenant's volumes
 * take, and who has each volume mounted (the writer lock). Creating (with the quota check),
 * claiming a mount (with the writer check) and starting a delete (with the in-use check) are
 * each one Lua script, so two requests can never both win.
 *
 * Keys (under the prefix): `volume:rec:<tenant>:<name>` (hash: `json` the record as created,
 * `state`, `id`, `shared`), `volume:names:<tenant>` (set), `volume:bytes:<tenant>` (integer),
 * `volume:mounts:<volume id>` (hash: lease id → `{readOnly, atMs}`), `volume:lease:<lease id>`
 * (set of the volume ids the lease mounted). Tenant names hold no `:`, so tenants' keys never meet.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { VolumeRecord } from './schema.js';

/** One lease's hold on a volume: read-only or not, and when it was taken (ms since the epoch). */
export const MountHold = z.object({ readOnly: z.boolean(), atMs: z.number() });
export type MountHold = z.infer<typeof MountHold>;

// KEYS: rec, names, bytes. ARGV: record JSON, name, sizeBytes, limit (-1: none), id, shared (1/0).
// Returns {} when made, {'exists'}, or {'quota', limit, used}.
const CREATE = `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local limit = tonumber(ARGV[4])
if limit >= 0 and used + tonumber(ARGV[3]) > limit then return {'quota', tostring(limit), tostring(used)} end
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'state', 'creating', 'id', ARGV[5], 'shared', ARGV[6])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('INCRBY', KEYS[3], ARGV[3])
return {}`;

// KEYS: rec, mounts, lease index. ARGV: lease id, readOnly (1/0), atMs, volume id, then stale
// lease ids (ended leases) to drop first. Returns {} when claimed, {'not_found'}, or {'conflict', holder}.
const CLAIM = `
local rec = redis.call('HMGET', KEYS[1], 'state', 'id', 'shared')
if rec[1] ~= 'ready' or rec[2] ~= ARGV[4] then return {'not_found'} end
for i = 5, #ARGV do redis.call('HDEL', KEYS[2], ARGV[i]) end
if ARGV[2] == '0' and rec[3] ~= '1' then
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] and cjson.decode(all[i + 1]).readOnly == false then return {'conflict', all[i]} end
  end
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode({readOnly = ARGV[2] == '1', atMs = tonumber(ARGV[3])}))
redis.call('SADD', KEYS[3], ARGV[4])
return {}`;

// KEYS: rec, mounts. ARGV: volume id, then stale lease ids. Returns {} when the volume is now
// `deleting`, {'not_found'}, or {'in_use', holder...}.
const BEGIN_DELETE = `
local rec = redis.call('HMGET', KEYS[1], 'state', 'id')
if not rec[1] or rec[2] ~= ARGV[1] then return {'not_found'} end
for i = 2, #ARGV do redis.call('HDEL', KEYS[2], ARGV[i]) end
local holders = redis.call('HKEYS', KEYS[2])
if #holders > 0 then table.insert(holders, 1, 'in_use') return holders end
redis.call('HSET', KEYS[1], 'state', 'deleting')
return {}`;

export type CreateOutcome =
  { made: true } | { made: false; reason: 'exists' } | { made: false; reason: 'quota'; limit: number; used: number };
export type ClaimOutcome =
  { claimed: true } | { claimed: false; reason: 'not_found' } | { claimed: false; reason: 'conflict'; holder: string };
export type DeleteOutcome = { begun: true } | { begun: false; reason: 'not_found' } | { begun: false; reason: 'in_use'; holders: string[] };

export class RedisVolumeStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    rec: (tenant: string, name: string) => `${this.prefix}volume:rec:${tenant}:${name}`,
    names: (tenant: string) => `${this.prefix}volume:names:${tenant}`,
    bytes: (tenant: string) => `${this.prefix}volume:bytes:${tenant}`,
    mounts: (id: string) => `${this.prefix}volume:mounts:${id}`,
    lease: (leaseId: string) => `${this.prefix}volume:lease:${leaseId}`,
  };

  /** Records `record` as `creating` and counts its bytes, unless the name is taken or `limitBytes` (null: none) would be exceeded. */
  async create(record: VolumeRecord, limitBytes: number | null): Promise<CreateOutcome> {
    const { tenant, name } = record;
    const answer = (await this.redis.eval(
      CREATE,
      3,
      this.k.rec(tenant, name),
      this.k.names(tenant),
      this.k.bytes(tenant),
      JSON.stringify(record),
      name,
      record.sizeBytes,
      limitBytes ?? -1,
      record.id,
      record.shared ? '1' : '0',
    )) as string[];
    if (answer.length === 0) return { made: true };
    if (answer[0] === 'exists') return { made: false, reason: 'exists' };
    return { made: false, reason: 'quota', limit: Number(answer[1]), used: Number(answer[2]) };
  }

  /** Sets the volume's state (`ready` once its disk is made). */
  async setState(tenant: string, name: string, state: VolumeRecord['state']): Promise<void> {
    await this.redis.hset(this.k.rec(tenant, name), 'state', state);
  }

  /** The record of `tenant`'s volume `name`, or null. */
  async get(tenant: string, name: string): Promise<VolumeRecord | null> {
    const [json, state] = await this.redis.hmget(this.k.rec(tenant, name), 'json', 'state');
    if (json == null || state == null) return null;
    return VolumeRecord.parse({ ...JSON.parse(json), state });
  }

  /** Every volume of `tenant`, by name. */
  async list(tenant: string): Promise<VolumeRecord[]> {
    const names = (await this.redis.smembers(this.k.names(tenant))).sort();
    const records = await Promise.all(names.map((n) => this.get(tenant, n)));
    return records.filter((r): r is VolumeRecord => r !== null);
  }

  /** Bytes of `tenant`'s volumes (their sizes summed). */
  async usedBytes(tenant: string): Promise<number> {
    return Number((await this.redis.get(this.k.bytes(tenant))) ?? 0);
  }

  /** Who has volume `id` mounted: lease id → hold. */
  async holders(id: string): Promise<Map<string, MountHold>> {
    const all = await this.redis.hgetall(this.k.mounts(id));
    return new Map(Object.entries(all).map(([leaseId, text]) => [leaseId, MountHold.parse(JSON.parse(text))]));
  }

  /**
   * Claims a mount of `record` for `leaseId` (read-write takes the writer lock of a volume that
   * is not shared), after dropping the holds of `stale` leases.
   */
  async claim(record: VolumeRecord, leaseId: string, readOnly: boolean, atMs: number, stale: readonly string[]): Promise<ClaimOutcome> {
    const answer = (await this.redis.eval(
      CLAIM,
      3,
      this.k.rec(record.tenant, record.name),
      this.k.mounts(record.id),
      this.k.lease(leaseId),
      leaseId,
      readOnly ? '1' : '0',
      atMs,
      record.id,
      ...stale,
    )) as string[];
    if (answer.length === 0) return { claimed: true };
    if (answer[0] === 'conflict') return { claimed: false, reason: 'conflict', holder: answer[1]! };
    return { claimed: false, reason: 'not_found' };
  }

  /** Drops every mount `leaseId` holds. Idempotent. */
  async releaseLease(leaseId: string): Promise<void> {
    const ids = await this.redis.smembers(this.k.lease(leaseId));
    const multi = this.redis.multi();
    for (const id of ids) multi.hdel(this.k.mounts(id), leaseId);
    multi.del(this.k.lease(leaseId));
    await multi.exec();
  }

  /** Marks the volume `deleting` unless a lease other than the `stale` ones has it mounted. */
  async beginDelete(record: VolumeRecord, stale: readonly string[]): Promise<DeleteOutcome> {
    const answer = (await this.redis.eval(
      BEGIN_DELETE,
      2,
      this.k.rec(record.tenant, record.name),
      this.k.mounts(record.id),
      record.id,
      ...stale,
    )) as string[];
    if (answer.length === 0) return { begun: true };
    if (answer[0] === 'in_use') return { begun: false, reason: 'in_use', holders: answer.slice(1) };
    return { begun: false, reason: 'not_found' };
  }

  /** Forgets the volume: its record, name, bytes and mounts. */
  async remove(record: VolumeRecord): Promise<void> {
    await this.redis
      .multi()
      .del(this.k.rec(record.tenant, record.name))
      .srem(this.k.names(record.tenant), record.name)
      .decrby(this.k.bytes(record.tenant), record.sizeBytes)
      .del(this.k.mounts(record.id))
      .exec();
  }
}
