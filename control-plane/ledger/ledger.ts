/**
 * The ledger: durable records of leases, calls, events and receipts in Redis (AOF on,
 * noeviction). Calls, events and receipts outlive their lease: releasing a sandbox never
 * deletes them.
 *
 * Events get their `seq` here, per call from 1 without gaps, in arrival order; each append
 * carries a dedupe key (e.g. `<attemptId>:<n>`) so a message delivered twice is stored once.
 * Every mutation of a call publishes on `<prefix>notify:<leaseId>:<callId>` so SSE streams and
 * long-polls wake up.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { canonicalJson } from '../../contract/digest.js';
import { CallEvent, type EventBody } from '../../contract/events.js';
import { Artifact, CallStatus, EffectReceipt, EgressEvent, Lease, LeaseEvent, LeaseStatus, Timestamp, ToolResult, type CallView } from '../../contract/objects.js';
import { SecretGrant } from '../../contract/queue.js';
import { EnvMap } from '../../contract/tools.js';
import { AuditActor } from '../audit/schema.js';
import { PolicyShape } from '../policies/schema.js';

/** What the ledger keeps of a lease: the API view plus what the control plane needs to run it. */
export const LeaseRecord = Lease.extend({
  /** Records written before the lifecycle had `pending`/`starting` say `creating`. */
  status: z.preprocess((s) => (s === 'creating' ? 'starting' : s), LeaseStatus),
  owner: z.string(),
  env: EnvMap,
  /** The policy version the lease is bound to, as it was at creation (read back without today's cross-field rules). */
  policySnapshot: PolicyShape,
  /** Secrets granted to the lease: names and how they are delivered, never values. */
  secrets: z.array(SecretGrant).default([]),
  containerId: z.string().nullable(),
  /**
   * The control-plane process creating (`pending`, `starting`) or releasing (`releasing`) the
   * lease; another process takes that work over once this one's liveness key is gone
   * (`LeaseChannels.isAlive`). Null in the other states.
   */
  inProgressBy: z.string().nullable().default(null),
  /** While `releasing`: until when running calls may finish before they are cancelled. */
  releaseGraceUntil: Timestamp.nullable().default(null),
  /** Who ended it (the audit actor of its release, expiry or loss), set with `endReason`. */
  endedBy: AuditActor.nullable().default(null),
});
export type LeaseRecord = z.infer<typeof LeaseRecord>;

/** A change of a lease decided by `Ledger.transitionLease`: the new record and why. */
export interface LeaseTransition {
  record: LeaseRecord;
  reason: string;
  details?: Record<string, unknown>;
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

/** The intent half of a call record (what the client asked for, resolved). */
export const CallIntent = z.object({
  callId: z.string(),
  leaseId: z.string(),
  tool: z.string(),
  args: z.record(z.string(), z.unknown()),
  fingerprint: z.string(),
  createdAt: z.string(),
});
export type CallIntent = z.infer<typeof CallIntent>;

const APPEND_EVENT = `
if ARGV[4] == '1' and redis.call('HGET', KEYS[3], 'status') == 'finished' then return 0 end
if ARGV[1] ~= '' and redis.call('HSETNX', KEYS[2], ARGV[1], 1) == 0 then return 0 end
local seq = redis.call('LLEN', KEYS[1]) + 1
redis.call('RPUSH', KEYS[1], '{"seq":' .. seq .. ',' .. string.sub(ARGV[2], 2))
redis.call('PUBLISH', ARGV[3], seq)
return seq`;

const CREATE_CALL = `
local existing = redis.call('HGET', KEYS[1], 'intent')
if existing then return existing end
redis.call('HSET', KEYS[1], 'intent', ARGV[1], 'status', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return false`;

const MARK_RUNNING = `
if redis.call('HGET', KEYS[1], 'status') == 'queued' then redis.call('HSET', KEYS[1], 'status', 'running') return 1 end
return 0`;

const DETACH_CALL = `
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'detached', 'detached', ARGV[1])
local seq = redis.call('LLEN', KEYS[2]) + 1
redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[2], 2))
redis.call('PUBLISH', ARGV[3], seq)
return 1`;

const FINISH_CALL = `
local status = redis.call('HGET', KEYS[1], 'status')
if not status or status == 'finished' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'finished', 'result', ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[4], ARGV[2]) end
for i = 3, #ARGV - 1 do
  local seq = redis.call('LLEN', KEYS[2]) + 1
  redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[i], 2))
end
redis.call('HSET', KEYS[3], 'finished', 1)
redis.call('PUBLISH', ARGV[#ARGV], 'finished')
return 1`;

/** Egress events kept per lease and decision (the oldest go first, counted). */
export const EGRESS_LOG_MAX = 10_000;

const APPEND_EGRESS = `
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local max = tonumber(ARGV[2])
if n > max then
  redis.call('LTRIM', KEYS[1], n - max, -1)
  redis.call('HINCRBY', KEYS[2], ARGV[3], n - max)
end
return n`;

export class Ledger {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    lease: (id: string) => `${this.prefix}leases:${id}`,
    leases: () => `${this.prefix}leases`,
    statuses: () => `${this.prefix}leases:statuses`,
    leaseEvents: (id: string) => `${this.prefix}lease-events:${id}`,
    idem: (key: string) => `${this.prefix}idem:${key}`,
    call: (leaseId: string, callId: string) => `${this.prefix}calls:${leaseId}:${callId}`,
    calls: (leaseId: string) => `${this.prefix}calls:${leaseId}`,
    events: (leaseId: string, callId: string) => `${this.prefix}events:${leaseId}:${callId}`,
    eventKeys: (leaseId: string, callId: string) => `${this.prefix}eventkeys:${leaseId}:${callId}`,
    receipt: (id: string) => `${this.prefix}receipts:${id}`,
    artifact: (id: string) => `${this.prefix}artifacts:${id}`,
    artifactChunks: (id: string) => `${this.prefix}artifacts:${id}:chunks`,
    leaseArtifacts: (leaseId: string) => `${this.prefix}artifacts-of:${leaseId}`,
    egress: (leaseId: string, decision: EgressEvent['decision']) => `${this.prefix}egress:${leaseId}:${decision}`,
    egressDropped: (leaseId: string) => `${this.prefix}egress:${leaseId}:dropped`,
  };

  /** Pub/sub channel pattern of call notifications. */
  get notifyPattern(): string {
    return `${this.prefix}notify:*`;
  }

  notifyChannel(leaseId: string, callId: string): string {
    return `${this.prefix}notify:${leaseId}:${callId}`;
  }

  // ---- leases

  /**
   * Records a new lease and its first lease event (`from: null`), atomically. Returns false when
   * a lease with this id exists (nothing is written).
   */
  async createLease(lease: LeaseRecord, reason: string, at: Date): Promise<boolean> {
    const created = (await this.redis.eval(
      CREATE_LEASE,
      4,
      this.k.lease(lease.id),
      this.k.leases(),
      this.k.leaseEvents(lease.id),
      this.k.statuses(),
      JSON.stringify(lease),
      Date.parse(lease.createdAt),
      lease.id,
      leaseEventJson({ from: null, to: lease.status, reason, details: {} }, at),
      lease.status,
    )) as number;
    return created === 1;
  }

  /**
   * Changes a lease atomically: `decide` sees the stored record and returns the next one (and
   * why), or null to leave it. The write is a compare-and-swap on the record as read, retried
   * with a fresh read when another writer came first, so of two processes deciding the same
   * transition (say `ready` → `releasing`) exactly one applies it. Each applied change appends
   * one lease event `{from, to, reason, details}`. Returns whether it applied and the record
   * as it is now (null when there is no lease). `decide` may throw; nothing is written then.
   */
  async transitionLease(id: string, decide: (lease: LeaseRecord) => LeaseTransition | null, at: () => Date): Promise<{ applied: boolean; lease: LeaseRecord | null }> {
    for (;;) {
      const text = await this.redis.get(this.k.lease(id));
      if (text === null) return { applied: false, lease: null };
      const current = LeaseRecord.parse(JSON.parse(text));
      const next = decide(current);
      if (next === null) return { applied: false, lease: current };
      const event = leaseEventJson({ from: current.status, to: next.record.status, reason: next.reason, details: next.details ?? {} }, at());
      // The status index (for counting leases by state without reading every record) moves with the record.
      const seq = (await this.redis.eval(TRANSITION_LEASE, 3, this.k.lease(id), this.k.leaseEvents(id), this.k.statuses(), text, JSON.stringify(next.record), event, id, next.record.status)) as number;
      if (seq > 0) return { applied: true, lease: next.record };
    }
  }

  /** The lease's status transitions, oldest first. */
  async leaseEvents(id: string): Promise<LeaseEvent[]> {
    return (await this.redis.lrange(this.k.leaseEvents(id), 0, -1)).map((t) => LeaseEvent.parse(JSON.parse(t)));
  }

  /**
   * Every lease the ledger holds (those whose records retention has not expired yet) with its
   * status. Reads the status index `createLease` and `transitionLease` keep, not the records; entries of expired records
   * are dropped from it here, and leases written before the index existed are added to it.
   */
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
    const text = await this.redis.get(this.k.lease(id));
    return text === null ? null : LeaseRecord.parse(JSON.parse(text));
  }

  /** Leases, newest first. Ids whose record has expired (retention) are dropped from the index. */
  async listLeases(limit = 1000): Promise<LeaseRecord[]> {
    const ids = await this.redis.zrevrange(this.k.leases(), 0, limit - 1);
    if (ids.length === 0) return [];
    const texts = await this.redis.mget(ids.map((id) => this.k.lease(id)));
    const gone = ids.filter((_, i) => texts[i] === null);
    if (gone.length > 0) await this.redis.zrem(this.k.leases(), ...gone);
    return texts.flatMap((t) => (t === null ? [] : [LeaseRecord.parse(JSON.parse(t))]));
  }

  /**
   * Starts the retention clock of an ended lease: its record, calls, events and receipts
   * expire after `seconds` (Redis EXPIRE), so a long-running installation does not grow without
   * bound. Until then all of it stays readable.
   */
  async retain(leaseId: string, seconds: number): Promise<void> {
    const callIds = await this.redis.zrange(this.k.calls(leaseId), 0, -1);
    const multi = this.redis.multi().expire(this.k.lease(leaseId), seconds).expire(this.k.leaseEvents(leaseId), seconds).expire(this.k.calls(leaseId), seconds);
    const expiresAt = new Date(Date.now() + seconds * 1000).toISOString();
    for (const id of await this.redis.smembers(this.k.leaseArtifacts(leaseId))) {
      const artifact = await this.getArtifact(id);
      if (artifact) multi.set(this.k.artifact(id), JSON.stringify({ ...artifact, expiresAt }), 'EX', seconds);
    }
    multi.expire(this.k.leaseArtifacts(leaseId), seconds);
    for (const key of [this.k.egress(leaseId, 'allowed'), this.k.egress(leaseId, 'denied'), this.k.egressDropped(leaseId)]) multi.expire(key, seconds);
    for (const callId of callIds) {
      multi.expire(this.k.call(leaseId, callId), seconds).expire(this.k.events(leaseId, callId), seconds).expire(this.k.eventKeys(leaseId, callId), seconds);
    }
    for (const callId of callIds) {
      const result = await this.redis.hget(this.k.call(leaseId, callId), 'result');
      const receiptId = result ? (JSON.parse(result) as { receipt?: { receiptId?: string } | null }).receipt?.receiptId : undefined;
      if (receiptId) multi.expire(this.k.receipt(receiptId), seconds);
    }
    await multi.exec();
  }

  /**
   * Appends an egress event. Allowed and denied events are kept apart, the newest
   * EGRESS_LOG_MAX of each, and what falls off is counted: a sandbox flooding denied requests
   * cannot push its allowed connections out of the log, and no loss goes unreported.
   */
  async appendEgress(leaseId: string, event: EgressEvent): Promise<void> {
    await this.redis.eval(APPEND_EGRESS, 2, this.k.egress(leaseId, event.decision), this.k.egressDropped(leaseId), JSON.stringify(event), EGRESS_LOG_MAX, event.decision);
  }

  /** A lease's egress events, oldest first, and how many of each decision were dropped as the oldest. */
  async readEgress(leaseId: string): Promise<{ events: EgressEvent[]; dropped: { allowed: number; denied: number } }> {
    const [allowed, denied, dropped] = await Promise.all([
      this.redis.lrange(this.k.egress(leaseId, 'allowed'), 0, -1),
      this.redis.lrange(this.k.egress(leaseId, 'denied'), 0, -1),
      this.redis.hgetall(this.k.egressDropped(leaseId)),
    ]);
    const events = [...allowed, ...denied].map((t) => EgressEvent.parse(JSON.parse(t))).sort((a, b) => a.at.localeCompare(b.at));
    return { events, dropped: { allowed: Number(dropped.allowed ?? 0), denied: Number(dropped.denied ?? 0) } };
  }

  /**
   * Binds an Idempotency-Key to a lease id. Returns null when this caller won the key, or the
   * earlier binding `{leaseId, requestDigest}`. Keys live 24 h.
   */
  async claimIdempotencyKey(key: string, leaseId: string, requestDigest: string): Promise<{ leaseId: string; requestDigest: string } | null> {
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

  // ---- calls

  /** Records a call's intent unless the callId exists; returns the existing intent if it does. */
  async createCall(intent: CallIntent): Promise<CallIntent | null> {
    const existing = (await this.redis.eval(
      CREATE_CALL,
      2,
      this.k.call(intent.leaseId, intent.callId),
      this.k.calls(intent.leaseId),
      JSON.stringify(intent),
      'queued',
      Date.parse(intent.createdAt),
      intent.callId,
    )) as string | null;
    return existing === null ? null : CallIntent.parse(JSON.parse(existing));
  }

  async getCall(leaseId: string, callId: string): Promise<CallView | null> {
    const h = await this.redis.hgetall(this.k.call(leaseId, callId));
    if (!h.intent) return null;
    const intent = CallIntent.parse(JSON.parse(h.intent));
    return {
      ...intent,
      status: CallStatus.parse(h.status),
      detached: h.detached ? ToolResult.parse(JSON.parse(h.detached)) : null,
      result: h.result ? ToolResult.parse(JSON.parse(h.result)) : null,
    };
  }

  /** Ids of the lease's calls that have not finished. */
  async openCalls(leaseId: string): Promise<string[]> {
    const ids = await this.redis.zrange(this.k.calls(leaseId), 0, -1);
    const open: string[] = [];
    for (const id of ids) {
      const status = await this.redis.hget(this.k.call(leaseId, id), 'status');
      if (status && status !== 'finished') open.push(id);
    }
    return open;
  }

  async markRunning(leaseId: string, callId: string): Promise<void> {
    await this.redis.eval(MARK_RUNNING, 1, this.k.call(leaseId, callId));
  }

  /**
   * Appends one event; returns its `seq`, or null when `dedupeKey` was seen before (the event
   * is already stored) or, with `unlessFinished`, when the call has finished (nothing may
   * follow `call.finished`). An empty `dedupeKey` never dedupes.
   */
  async appendEvent(leaseId: string, callId: string, body: EventBody, at: Date, dedupeKey = '', options: { unlessFinished?: boolean } = {}): Promise<number | null> {
    const seq = (await this.redis.eval(
      APPEND_EVENT,
      3,
      this.k.events(leaseId, callId),
      this.k.eventKeys(leaseId, callId),
      this.k.call(leaseId, callId),
      dedupeKey,
      eventJson(callId, body, at),
      this.notifyChannel(leaseId, callId),
      options.unlessFinished ? '1' : '0',
    )) as number;
    return seq === 0 ? null : seq;
  }

  /**
   * Marks a running call as a detached background task with its handle result, appending
   * `call.detached`. False when the call is not queued or running (already detached or finished).
   */
  async detachCall(leaseId: string, callId: string, result: ToolResult, attemptId: string, at: Date): Promise<boolean> {
    const pid = typeof result.data?.pid === 'number' ? result.data.pid : null;
    const done = (await this.redis.eval(
      DETACH_CALL,
      2,
      this.k.call(leaseId, callId),
      this.k.events(leaseId, callId),
      JSON.stringify(result),
      eventJson(callId, { type: 'call.detached', attemptId, pid }, at),
      this.notifyChannel(leaseId, callId),
    )) as number;
    return done === 1;
  }

  /**
   * Stores the final result once: the first result wins, later ones are ignored (returns false).
   * Appends the `receipt` event (when there is a receipt) and `call.finished`, atomically.
   */
  async finishCall(leaseId: string, callId: string, result: ToolResult, at: Date): Promise<boolean> {
    const events: EventBody[] = [];
    if (result.receipt) events.push({ type: 'receipt', receipt: result.receipt });
    events.push({ type: 'call.finished', status: result.status });
    const done = (await this.redis.eval(
      FINISH_CALL,
      4,
      this.k.call(leaseId, callId),
      this.k.events(leaseId, callId),
      this.k.eventKeys(leaseId, callId),
      this.k.receipt(result.receipt?.receiptId ?? 'none'),
      JSON.stringify(result),
      result.receipt ? JSON.stringify(result.receipt) : '',
      ...events.map((e) => eventJson(callId, e, at)),
      this.notifyChannel(leaseId, callId),
    )) as number;
    return done === 1;
  }

  /** Events with `seq` > `afterSeq`, in order. */
  async readEvents(leaseId: string, callId: string, afterSeq = 0): Promise<CallEvent[]> {
    const texts = await this.redis.lrange(this.k.events(leaseId, callId), afterSeq, -1);
    return texts.map((t) => CallEvent.parse(JSON.parse(t)));
  }

  /** Records that chunk `index` of an artifact is stored; returns how many distinct chunks are. */
  async artifactChunkStored(artifactId: string, index: number): Promise<number> {
    const key = this.k.artifactChunks(artifactId);
    const [, count] = (await this.redis.multi().sadd(key, index).scard(key).expire(key, 24 * 3600).exec()) ?? [];
    return Number(count?.[1] ?? 0);
  }

  async putArtifact(artifact: Artifact): Promise<void> {
    await this.redis
      .multi()
      .set(this.k.artifact(artifact.id), JSON.stringify(artifact))
      .sadd(this.k.leaseArtifacts(artifact.leaseId), artifact.id)
      .del(this.k.artifactChunks(artifact.id))
      .exec();
  }

  async getArtifact(artifactId: string): Promise<Artifact | null> {
    const text = await this.redis.get(this.k.artifact(artifactId));
    return text === null ? null : Artifact.parse(JSON.parse(text));
  }

  async getReceipt(receiptId: string): Promise<EffectReceipt | null> {
    const text = await this.redis.get(this.k.receipt(receiptId));
    return text === null ? null : EffectReceipt.parse(JSON.parse(text));
  }
}

function leaseEventJson(event: Omit<LeaseEvent, 'seq' | 'at'>, at: Date): string {
  // Starts with '{' so the scripts can splice `"seq":N,` in front.
  return canonicalJson({ ...event, at: at.toISOString() });
}

function eventJson(callId: string, body: EventBody, at: Date): string {
  // Starts with '{' so the scripts can splice `"seq":N,` in front; canonical for stable bytes.
  return canonicalJson({ ...body, at: at.toISOString(), callId });
}
