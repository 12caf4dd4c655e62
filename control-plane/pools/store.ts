/**
 * The warm pools' state in Redis, shared by every control-plane process of the installation:
 * - `<prefix>pool:members`: hash, sandbox id → `Member` (which pool, starting or ready, its facts);
 * - `<prefix>pool:<name>:ready`: list of ready ids, oldest first;
 * - `<prefix>pool:<name>:claimed-at`: when a lease last claimed from the pool (ms);
 * - `<prefix>pool:<name>:filler`: lock of the one process filling the pool now;
 * - `<prefix>pool:claimed`: hash, id → when it was claimed (ms), until the claiming lease's
 *   record exists (`settle`): in between the sandbox is neither a member nor a lease, and
 *   reconcile must still not take it for an orphan.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { PolicyRef, SandboxFacts } from '../../contract/objects.js';
import { RedisLock } from '../redis/lock.js';

/** A pool's sandbox as the store keeps it. */
export const Member = z.object({
  pool: z.string(),
  state: z.enum(['starting', 'ready']),
  /** When it entered this state, ms since the epoch. */
  since: z.number(),
  sandbox: z
    .object({
      id: z.string(),
      containerId: z.string(),
      facts: SandboxFacts,
      ref: PolicyRef,
      image: z.string(),
      /**
       * The engine's id of the image it runs (`ImageConfig.id`): a claim whose image name now
       * names another image (a moved tag) does not get it. Records from before this field never match.
       */
      imageId: z.string().optional(),
      /** Writable roots filled from the image; records from before this field read as unknown. */
      seededPaths: z.array(z.string()).optional(),
    })
    .nullable(),
});
export type Member = z.infer<typeof Member>;

/** Pops the oldest ready id of a pool, forgets its member record and marks it claimed, atomically. */
const CLAIM = `
local id = redis.call('LPOP', KEYS[1])
if not id then return false end
local member = redis.call('HGET', KEYS[2], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HSET', KEYS[3], id, ARGV[1])
return member`;

export class PoolStore {
  private readonly locks: RedisLock;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {
    this.locks = new RedisLock(redis);
  }

  private k = {
    members: () => `${this.prefix}pool:members`,
    ready: (pool: string) => `${this.prefix}pool:${pool}:ready`,
    claimedAt: (pool: string) => `${this.prefix}pool:${pool}:claimed-at`,
    filler: (pool: string) => `${this.prefix}pool:${pool}:filler`,
    claimed: () => `${this.prefix}pool:claimed`,
  };

  /** Pops the oldest ready sandbox of `pool`, forgets its member record and marks it claimed at `atMs` (see CLAIM); null when there is none. */
  async pop(pool: string, atMs: number): Promise<Member | null> {
    const text = (await this.redis.eval(CLAIM, 3, this.k.ready(pool), this.k.members(), this.k.claimed(), String(atMs))) as string | null;
    return text === null ? null : Member.parse(JSON.parse(text));
  }

  /** Records that a lease claimed from `pool` at `atMs`. */
  async markClaimed(pool: string, atMs: number): Promise<void> {
    await this.redis.set(this.k.claimedAt(pool), String(atMs));
  }

  /** When a lease last claimed from `pool` (ms; 0: never). */
  async lastClaimedAt(pool: string): Promise<number> {
    return Number((await this.redis.get(this.k.claimedAt(pool))) ?? 0);
  }

  /** Forgets the claim of `ids` (settled, or left by a create that died). */
  async settle(...ids: string[]): Promise<void> {
    if (ids.length > 0) await this.redis.hdel(this.k.claimed(), ...ids);
  }

  /** Claimed ids with when they were claimed (ms). */
  async claims(): Promise<Map<string, number>> {
    return new Map(Object.entries(await this.redis.hgetall(this.k.claimed())).map(([id, at]) => [id, Number(at)]));
  }

  /** Whether `id` is a member or a claim not yet settled. */
  async owns(id: string): Promise<boolean> {
    const [member, claimed] = await Promise.all([this.redis.hexists(this.k.members(), id), this.redis.hexists(this.k.claimed(), id)]);
    return member === 1 || claimed === 1;
  }

  /** The members of `pool` (records that fail the schema are skipped). */
  async membersOf(pool: string): Promise<Map<string, Member>> {
    const all = await this.redis.hgetall(this.k.members());
    const out = new Map<string, Member>();
    for (const [id, text] of Object.entries(all)) {
      const parsed = Member.safeParse(JSON.parse(text));
      if (parsed.success && parsed.data.pool === pool) out.set(id, parsed.data);
    }
    return out;
  }

  /** Records a member that is starting. */
  async putStarting(id: string, member: Member): Promise<void> {
    await this.redis.hset(this.k.members(), id, JSON.stringify(member));
  }

  /** Records a member as ready and appends it to its pool's ready list. */
  async putReady(id: string, member: Member): Promise<void> {
    await this.redis.multi().hset(this.k.members(), id, JSON.stringify(member)).rpush(this.k.ready(member.pool), id).exec();
  }

  /** Takes `id` off `pool`'s ready list; false when it was not there (a claim took it). */
  async takeReady(pool: string, id: string): Promise<boolean> {
    return (await this.redis.lrem(this.k.ready(pool), 1, id)) > 0;
  }

  /** Forgets a member's record. */
  async forget(id: string): Promise<void> {
    await this.redis.hdel(this.k.members(), id);
  }

  /** Takes or renews `holder`'s filler lock of `pool` for `ttlMs`: one process fills a pool at a time. */
  holdFiller(pool: string, holder: string, ttlMs: number): Promise<boolean> {
    return this.locks.hold(this.k.filler(pool), holder, ttlMs);
  }
}
