/**
 * The lease records in Redis (AOF on, noeviction): each lease's record and its lease events
 * (status transitions, `seq` from 1), the index of leases and of their statuses, the
 * Idempotency-Keys of creates and one-time claims. Every change of a lease is a
 * compare-and-swap that appends its lease event (`transitionLease`).
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { z } from 'zod';
import { canonicalJson } from '../../contract/digest.js';
import { Lease, LEASE_ID_PREFIX, LeaseEvent, LeaseStatus, TERMINAL_LEASE_STATUSES, Timestamp } from '../../contract/objects.js';
import { SecretGrant, ToolUser } from '../../contract/queue.js';
import { EnvMap } from '../../contract/tools.js';
import { AuditActor } from '../audit/schema.js';
import { PolicyShape } from '../policies/schema.js';
import { ParsedTexts } from '../redis/parsed-texts.js';
import { TrackedKeys } from '../redis/tracked-keys.js';

/** What the store keeps of a lease: the API view plus what the control plane needs to run it. */
export const LeaseRecord = Lease.extend({
  /** Records written before the lifecycle had `pending`/`starting` say `creating`. */
  status: z.preprocess((s) => (s === 'creating' ? 'starting' : s), LeaseStatus),
  owner: z.string(),
  env: EnvMap,
  /** The policy version the lease is bound to, as it was at creation (read back without today's cross-field rules). */
  policySnapshot: PolicyShape,
  /**
   * Who the tools run as (the policy's tool user, the image's `User`, or the default), as the
   * plan resolved it. Records before it: the policy snapshot's `runtime.toolUser`.
   */
  toolUser: ToolUser.optional(),
  /** Secrets granted to the lease: names and how they are delivered, never values. */
  secrets: z.array(SecretGrant).default([]),
  containerId: z.string().nullable(),
  /**
   * The control-plane process creating (`pending`, `starting`) or releasing (`releasing`) the
   * lease; another process takes that work over once this one's liveness key is gone
   * (`Liveness.isAlive`). Null in the other states.
   */
  inProgressBy: z.string().nullable().default(null),
  /** While `releasing`: until when running calls may finish before they are cancelled. */
  releaseGraceUntil: Timestamp.nullable().default(null),
  /** Who ended it (the audit actor of its release, expiry or loss), set with `endReason`. */
  endedBy: AuditActor.nullable().default(null),
  /** While `paused` (and `releasing` from a pause): the running TTL the lease had left when paused, ms; restored on resume. */
  runningTtlLeftMs: z.number().int().nonnegative().nullable().default(null),
  /** Time spent paused in earlier, finished pauses, ms: counts against `resources.pausedTtlSeconds`. */
  pausedTotalMs: z.number().int().nonnegative().default(0),
});
export type LeaseRecord = z.infer<typeof LeaseRecord>;

/** A change of a lease decided by `LeaseStore.transitionLease`: the new record and why. */
export interface LeaseTransition {
  record: LeaseRecord;
  reason: string;
  details?: Record<string, unknown>;
}

/** Leases whose parsed record LeaseStore keeps. */
const PARSED_MAX = 4096;

/** Where the lease records are (`<prefix>leases:<id>`); the status index `<prefix>leases:statuses` is under it too. */
export function leaseKeyPrefix(prefix: string): string {
  return `${prefix}leases:`;
}

const CREATE_LEASE = `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('RPUSH', KEYS[3], '{"seq":1,' .. string.sub(ARGV[4], 2))
redis.call('HSET', KEYS[4], ARGV[3], ARGV[5])
return 1`;

/** Compare-and-swap of a lease record (exact stored text), appending its lease event. */
const TRANSITION_LEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
local seq = redis.call('LLEN', KEYS[2]) + 1
redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[3], 2))
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return seq`;

export class LeaseStore {
  /**
   * The last record read or written of each lease, parsed and deep-frozen, by its stored text:
   * reading a lease is a Redis GET (or a hit of the tracked cache, which Redis keeps true), and
   * the schema parse only when the text changed. A transition's next read of the record it wrote
   * parses nothing either.
   */
  private readonly parsed = new ParsedTexts<LeaseRecord>((text) => LeaseRecord.parse(JSON.parse(text)), PARSED_MAX);

  /**
   * `tracked`: lease reads through a tracked cache (redis/tracked-keys.ts, over the lease
   * records' keys); without it every read is a GET.
   */
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly tracked?: Pick<TrackedKeys, 'get' | 'forget' | 'close'>,
  ) {}

  /**
   * A store whose lease reads (every sandbox request makes one) are cached in the process and
   * kept true by Redis's invalidations (redis/tracked-keys.ts). `close()` ends the tracking.
   * Tracked are the keys of lease records alone (`leases:sbx_…`): the status index changes with
   * every transition, and tracking it would send each process one more invalidation for nothing.
   */
  static async tracked(redis: Redis, prefix: string, log: Pick<Logger, 'warn'>): Promise<LeaseStore> {
    return new LeaseStore(redis, prefix, await TrackedKeys.start(redis, [`${leaseKeyPrefix(prefix)}${LEASE_ID_PREFIX}`], log));
  }

  /** Ends the read cache's tracking connection (reads go to Redis after). */
  close(): void {
    this.tracked?.close();
  }

  private k = {
    lease: (id: string) => `${leaseKeyPrefix(this.prefix)}${id}`,
    leases: () => `${this.prefix}leases`,
    statuses: () => `${this.prefix}leases:statuses`,
    leaseEvents: (id: string) => `${this.prefix}lease-events:${id}`,
    idem: (key: string) => `${this.prefix}idem:${key}`,
  };

  /**
   * Records a new lease and its first lease event (`from: null`), atomically. Returns false when
   * a lease with this id exists (nothing is written). A written `lease` is deep-frozen: reads of
   * the lease share it.
   */
  async createLease(lease: LeaseRecord, reason: string, at: Date): Promise<boolean> {
    const text = JSON.stringify(lease);
    const created = (await this.redis.eval(
      CREATE_LEASE,
      4,
      this.k.lease(lease.id),
      this.k.leases(),
      this.k.leaseEvents(lease.id),
      this.k.statuses(),
      text,
      Date.parse(lease.createdAt),
      lease.id,
      leaseEventJson({ from: null, to: lease.status, reason, details: {} }, at),
      lease.status,
    )) as number;
    this.tracked?.forget(this.k.lease(lease.id));
    if (created === 1) this.parsed.remember(lease.id, text, lease);
    return created === 1;
  }

  /**
   * Changes a lease atomically: `decide` sees the stored record and returns the next one (and
   * why), or null to leave it. The write is a compare-and-swap on the record as read, retried
   * with a fresh read when another writer came first, so of two processes deciding the same
   * transition (say `ready` → `releasing`) exactly one applies it. Each applied change appends
   * one lease event `{from, to, reason, details}`. Returns whether it applied and the record
   * as it is now, deep-frozen (null when there is no lease). `decide` may throw; nothing is
   * written then.
   */
  async transitionLease(
    id: string,
    decide: (lease: LeaseRecord) => LeaseTransition | null,
    at: () => Date,
  ): Promise<{ applied: boolean; lease: LeaseRecord | null }> {
    for (;;) {
      const text = await this.redis.get(this.k.lease(id));
      if (text === null) return { applied: false, lease: null };
      const current = this.parsed.read(id, text);
      const next = decide(current);
      if (next === null) return { applied: false, lease: current };
      const event = leaseEventJson(
        { from: current.status, to: next.record.status, reason: next.reason, details: next.details ?? {} },
        at(),
      );
      const nextText = JSON.stringify(next.record);
      // The status index (for counting leases by state without reading every record) moves with the record.
      const seq = (await this.redis.eval(
        TRANSITION_LEASE,
        3,
        this.k.lease(id),
        this.k.leaseEvents(id),
        this.k.statuses(),
        text,
        nextText,
        event,
        id,
        next.record.status,
      )) as number;
      if (seq > 0) {
        this.tracked?.forget(this.k.lease(id));
        return { applied: true, lease: this.parsed.remember(id, nextText, next.record) };
      }
    }
  }

  /** The lease's status transitions, oldest first. */
  async leaseEvents(id: string): Promise<LeaseEvent[]> {
    return (await this.redis.lrange(this.k.leaseEvents(id), 0, -1)).map((t) => LeaseEvent.parse(JSON.parse(t)));
  }

  /**
   * Every lease the store holds (those whose records retention has not expired yet) with its
   * status. Reads the status index `createLease` and `transitionLease` keep, not the records; entries of expired records
   * are dropped from it here, and leases written before the index existed are added to it.
   */
  /** How many leases are in each state (states with none left out). */
  async statusCounts(): Promise<Record<string, number>> {
    const counts: Record<string, number> = {};
    for (const { status } of await this.leaseStatuses()) counts[status] = (counts[status] ?? 0) + 1;
    return counts;
  }

  async leaseStatuses(): Promise<Array<{ id: string; status: string }>> {
    const [indexed, total] = await Promise.all([this.redis.hlen(this.k.statuses()), this.redis.zcard(this.k.leases())]);
    if (indexed < total) await this.indexStatuses();
    const entries = Object.entries(await this.redis.hgetall(this.k.statuses()));
    if (entries.length === 0) return [];
    const exists = (await entries.reduce((p, [id]) => p.exists(this.k.lease(id)), this.redis.pipeline()).exec()) ?? [];
    const gone = entries.filter((_, i) => exists[i]?.[1] === 0).map(([id]) => id);
    if (gone.length > 0) await this.redis.hdel(this.k.statuses(), ...gone);
    return entries.filter((_, i) => exists[i]?.[1] !== 0).map(([id, status]) => ({ id, status }));
  }

  /** Adds to the status index the leases of the lease index it lacks; drops index ids whose record expired. */
  private async indexStatuses(): Promise<void> {
    const ids = await this.redis.zrange(this.k.leases(), 0, -1);
    const known = await this.redis.hmget(this.k.statuses(), ...ids);
    const missing = ids.filter((_, i) => known[i] === null);
    for (let i = 0; i < missing.length; i += 500) {
      const page = missing.slice(i, i + 500);
      const texts = await this.redis.mget(page.map((id) => this.k.lease(id)));
      const multi = this.redis.multi();
      page.forEach((id, j) => {
        const text = texts[j];
        if (text === null || text === undefined) multi.zrem(this.k.leases(), id);
        else multi.hsetnx(this.k.statuses(), id, LeaseRecord.parse(JSON.parse(text)).status);
      });
      await multi.exec();
    }
  }

  async getLease(id: string): Promise<LeaseRecord | null> {
    const key = this.k.lease(id);
    let text: string | null;
    try {
      text = this.tracked ? await this.tracked.get(key) : await this.redis.get(key);
    } catch (err) {
      // An id that names another key under the prefix (`statuses`, the status index) is no lease.
      if (err instanceof Error && err.message.startsWith('WRONGTYPE')) return null;
      throw err;
    }
    return text === null ? null : this.parsed.read(id, text);
  }

  /** What a lease holds of its tenant's quota (quotas/service.ts `LeaseHold`): tenant, resources, whether it ended; null: no record. */
  async holdOf(id: string): Promise<{ tenant: string; ended: boolean; cpus: number; memoryBytes: number } | null> {
    const lease = await this.getLease(id);
    if (!lease) return null;
    const { cpus, memoryBytes } = lease.policySnapshot.resources;
    return { tenant: lease.tenant, ended: TERMINAL_LEASE_STATUSES.has(lease.status), cpus, memoryBytes };
  }

  /** Leases, newest first. Ids whose record has expired (retention) are dropped from the index. */
  async listLeases(limit = 1000): Promise<LeaseRecord[]> {
    const ids = await this.redis.zrevrange(this.k.leases(), 0, limit - 1);
    if (ids.length === 0) return [];
    const texts = await this.redis.mget(ids.map((id) => this.k.lease(id)));
    const gone = ids.filter((_, i) => texts[i] === null);
    if (gone.length > 0) await this.redis.zrem(this.k.leases(), ...gone);
    return texts.flatMap((t, i) => (t === null ? [] : [this.parsed.read(ids[i]!, t)]));
  }

  /** Starts the retention clock of an ended lease's record and lease events: they expire after `seconds`. */
  async retain(leaseId: string, seconds: number): Promise<void> {
    await this.redis.multi().expire(this.k.lease(leaseId), seconds).expire(this.k.leaseEvents(leaseId), seconds).exec();
  }

  /**
   * Binds an Idempotency-Key to a lease id. Returns null when this caller won the key, or the
   * earlier binding `{leaseId, requestDigest}`. Keys live 24 h.
   */
  async claimIdempotencyKey(
    key: string,
    leaseId: string,
    requestDigest: string,
  ): Promise<{ leaseId: string; requestDigest: string } | null> {
    const value = JSON.stringify({ leaseId, requestDigest });
    const set = await this.redis.set(this.k.idem(key), value, 'EX', 24 * 3600, 'NX');
    if (set === 'OK') return null;
    const existing = await this.redis.get(this.k.idem(key));
    return existing === null ? null : (JSON.parse(existing) as { leaseId: string; requestDigest: string });
  }

  /**
   * True for the first caller to claim `name` within `ttlSeconds`, false for the others: makes
   * something several processes may do at once (reaping one sandbox's leftovers) recorded once.
   */
  async claimOnce(name: string, ttlSeconds: number): Promise<boolean> {
    return (await this.redis.set(`${this.prefix}claims:${name}`, '1', 'EX', ttlSeconds, 'NX')) === 'OK';
  }

  async releaseIdempotencyKey(key: string): Promise<void> {
    await this.redis.del(this.k.idem(key));
  }
}

function leaseEventJson(event: Omit<LeaseEvent, 'seq' | 'at'>, at: Date): string {
  // Starts with '{' so the scripts can splice `"seq":N,` in front.
  return canonicalJson({ ...event, at: at.toISOString() });
}

/** The API view of a lease record (internal fields dropped). */
export function toView(r: LeaseRecord): Lease {
  return {
    id: r.id,
    status: r.status,
    createdAt: r.createdAt,
    expiresAt: r.expiresAt,
    endedAt: r.endedAt,
    endReason: r.endReason,
    image: r.image,
    policy: r.policy,
    manifest: r.manifest,
    labels: r.labels,
    pausedAt: r.pausedAt,
    phase: r.phase,
    manifestHistory: r.manifestHistory,
    tenant: r.tenant,
  };
}

/** Who a lease's tools run as: its resolved tool user, or (records before it) its policy's. */
export function toolUserOf(lease: Pick<LeaseRecord, 'toolUser' | 'policySnapshot'>): ToolUser {
  const user = lease.toolUser ?? lease.policySnapshot.runtime.toolUser;
  if (!user) throw new Error('a lease record without a tool user (neither resolved nor in its policy)');
  return user;
}
