/**
 * The call records in Redis (AOF on, noeviction): each call's intent, status and result, its
 * events (gap-free `seq`), and receipts. They outlive their lease: releasing a sandbox never
 * deletes them (`retain` starts their retention clock).
 *
 * Events get their `seq` here, per call from 1 without gaps, in arrival order; each append
 * carries a dedupe key (e.g. `<attemptId>:<n>`) so a message delivered twice is stored once.
 * Every mutation of a call publishes on `<prefix>notify:<leaseId>:<callId>` so SSE streams,
 * long-polls and a release waiting for its calls wake up. The message says which: an event's
 * `seq`, `created`, `detached` or `finished` (CALL_SETTLED names the last two), so a waiter for
 * the call's end need not re-read it on every event.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { canonicalJson } from '../../contract/digest.js';
import { CallEvent, type EventBody } from '../../contract/events.js';
import { CallStatus, EffectReceipt, ToolResult, type CallView } from '../../contract/objects.js';
import { CallTrace } from './call-trace.js';

/** The intent half of a call record (what the client asked for, resolved). */
export const CallIntent = z.object({
  callId: z.string(),
  leaseId: z.string(),
  tool: z.string(),
  args: z.record(z.string(), z.unknown()),
  fingerprint: z.string(),
  createdAt: z.string(),
  /** The call's span when tracing is on (call-trace.ts); not part of the API's view. */
  trace: CallTrace.optional(),
});
export type CallIntent = z.infer<typeof CallIntent>;

// ARGV[5] == '1': the event says the attempt started, so a queued call becomes running in the
// same round trip (also for a redelivered copy of the event: marking is idempotent).
const APPEND_EVENT = `
local status = redis.call('HGET', KEYS[3], 'status')
if ARGV[4] == '1' and status == 'finished' then return 0 end
if ARGV[5] == '1' and status == 'queued' then redis.call('HSET', KEYS[3], 'status', 'running') end
if ARGV[1] ~= '' and redis.call('HSETNX', KEYS[2], ARGV[1], 1) == 0 then return 0 end
local seq = redis.call('LLEN', KEYS[1]) + 1
redis.call('RPUSH', KEYS[1], '{"seq":' .. seq .. ',' .. string.sub(ARGV[2], 2))
redis.call('PUBLISH', ARGV[3], seq)
return seq`;

// The intent and its first events (e.g. call.accepted) in one round trip: ARGV[8..] are event
// JSONs. A call created pending_approval gets its deadline (ARGV[6]) and its place among those
// waiting (KEYS[4], member ARGV[7]) in the same write: none waits without a deadline.
const CREATE_CALL = `
local existing = redis.call('HGET', KEYS[1], 'intent')
if existing then return existing end
redis.call('HSET', KEYS[1], 'intent', ARGV[1], 'status', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
if ARGV[2] == 'pending_approval' then
  redis.call('HSET', KEYS[1], 'approvalExpiresAt', ARGV[6])
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[7])
end
for i = 8, #ARGV do
  local seq = redis.call('LLEN', KEYS[3]) + 1
  redis.call('RPUSH', KEYS[3], '{"seq":' .. seq .. ',' .. string.sub(ARGV[i], 2))
end
if #ARGV >= 8 then redis.call('PUBLISH', ARGV[5], 'created') end
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
redis.call('PUBLISH', ARGV[3], 'detached')
return 1`;

// ARGV[5] ~= '': finish only a call in that status (a call waiting for approval, which an approval may take first).
const FINISH_CALL = `
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending_approval' then redis.call('ZREM', KEYS[5], ARGV[6]) end
if not status or status == 'finished' then return 0 end
if ARGV[5] ~= '' and status ~= ARGV[5] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'finished', 'result', ARGV[1], 'stdout', ARGV[2], 'stderr', ARGV[3])
if ARGV[4] ~= '' then redis.call('SET', KEYS[4], ARGV[4]) end
redis.call('ZREM', KEYS[5], ARGV[6])
for i = 7, #ARGV - 1 do
  local seq = redis.call('LLEN', KEYS[2]) + 1
  redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[i], 2))
end
redis.call('HSET', KEYS[3], 'finished', 1)
redis.call('PUBLISH', ARGV[#ARGV], 'finished')
return redis.call('HGET', KEYS[1], 'intent')`;

// A call waiting for approval is queued only if it still waits and its deadline has not passed:
// 'approved', 'expired', or its status as it is ('' when there is no call).
const APPROVE_CALL = `
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending_approval' then return status or '' end
if tonumber(redis.call('HGET', KEYS[1], 'approvalExpiresAt') or '0') < tonumber(ARGV[1]) then return 'expired' end
redis.call('HSET', KEYS[1], 'status', 'queued')
redis.call('ZREM', KEYS[2], ARGV[2])
return 'approved'`;

/** Notify messages of a call that settled: it finished, or detached as a background task. */
export const CALL_SETTLED = { finished: 'finished', detached: 'detached' } as const;

export class CallStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    call: (leaseId: string, callId: string) => `${this.prefix}calls:${leaseId}:${callId}`,
    /** Calls waiting for approval, every lease's, scored by their deadline (epoch ms); members `<leaseId> <callId>`. */
    approvals: () => `${this.prefix}approvals`,
    calls: (leaseId: string) => `${this.prefix}calls:${leaseId}`,
    events: (leaseId: string, callId: string) => `${this.prefix}events:${leaseId}:${callId}`,
    eventKeys: (leaseId: string, callId: string) => `${this.prefix}eventkeys:${leaseId}:${callId}`,
    receipt: (id: string) => `${this.prefix}receipts:${id}`,
  };

  /** Pub/sub channel pattern of call notifications. */
  get notifyPattern(): string {
    return `${this.prefix}notify:*`;
  }

  notifyChannel(leaseId: string, callId: string): string {
    return `${this.prefix}notify:${leaseId}:${callId}`;
  }

  /**
   * Records a call's intent unless the callId exists; returns the existing intent if it does.
   * `events` (stamped `at`) are appended with the intent in the same script, seq 1 onwards, so
   * a new call and its first events are one round trip. A call created `pending_approval` gets
   * its deadline (`approvalExpiresAtMs`, epoch ms) in that write too.
   */
  async createCall(
    intent: CallIntent,
    events: readonly EventBody[] = [],
    at: Date = new Date(intent.createdAt),
    status: 'queued' | 'pending_approval' = 'queued',
    approvalExpiresAtMs = 0,
  ): Promise<CallIntent | null> {
    const existing = (await this.redis.eval(
      CREATE_CALL,
      4,
      this.k.call(intent.leaseId, intent.callId),
      this.k.calls(intent.leaseId),
      this.k.events(intent.leaseId, intent.callId),
      this.k.approvals(),
      JSON.stringify(intent),
      status,
      Date.parse(intent.createdAt),
      intent.callId,
      this.notifyChannel(intent.leaseId, intent.callId),
      approvalExpiresAtMs,
      `${intent.leaseId} ${intent.callId}`,
      ...events.map((e) => eventJson(intent.callId, e, at)),
    )) as string | null;
    return existing === null ? null : CallIntent.parse(JSON.parse(existing));
  }

  async getCall(leaseId: string, callId: string): Promise<CallView | null> {
    const h = await this.redis.hgetall(this.k.call(leaseId, callId));
    if (!h.intent) return null;
    const { trace: _trace, ...intent } = CallIntent.parse(JSON.parse(h.intent));
    return {
      ...intent,
      status: CallStatus.parse(h.status),
      detached: h.detached ? ToolResult.parse(JSON.parse(h.detached)) : null,
      result: h.result ? ToolResult.parse(withOutput(JSON.parse(h.result), h)) : null,
    };
  }

  /** The span ids kept with a call's intent (call-trace.ts); undefined without a call or a trace. */
  async traceOf(leaseId: string, callId: string): Promise<CallTrace | undefined> {
    const intent = await this.redis.hget(this.k.call(leaseId, callId), 'intent');
    return intent ? CallIntent.parse(JSON.parse(intent)).trace : undefined;
  }

  /** The lease's newest `limit` calls, newest first: id, tool, status, submission time (one index read, one pipelined read). */
  async listCalls(leaseId: string, limit: number): Promise<Array<{ callId: string; tool: string; status: CallStatus; createdAt: string }>> {
    const ids = await this.redis.zrevrange(this.k.calls(leaseId), 0, limit - 1);
    const rows = (await ids.reduce((p, id) => p.hmget(this.k.call(leaseId, id), 'intent', 'status'), this.redis.pipeline()).exec()) ?? [];
    return rows.flatMap(([err, value]) => {
      const [intent, status] = (value ?? []) as [string | null, string | null];
      if (err || !intent || !status) return [];
      const { callId, tool, createdAt } = CallIntent.parse(JSON.parse(intent));
      return [{ callId, tool, status: CallStatus.parse(status), createdAt }];
    });
  }

  /** Ids of the lease's calls that have not finished (one read of the index, one pipelined read of the statuses). */
  async openCalls(leaseId: string): Promise<string[]> {
    const ids = await this.redis.zrange(this.k.calls(leaseId), 0, -1);
    if (ids.length === 0) return [];
    const statuses = (await ids.reduce((p, id) => p.hget(this.k.call(leaseId, id), 'status'), this.redis.pipeline()).exec()) ?? [];
    const failed = statuses.find(([err]) => err);
    if (failed) throw failed[0];
    return ids.filter((_, i) => {
      const status = statuses[i]?.[1] as string | null | undefined;
      return Boolean(status) && status !== 'finished';
    });
  }

  /** Marks a queued call running (no change in any other status). */
  async markRunning(leaseId: string, callId: string): Promise<void> {
    await this.redis.eval(MARK_RUNNING, 1, this.k.call(leaseId, callId));
  }

  /**
   * Appends one event; returns its `seq`, or null when `dedupeKey` was seen before (the event
   * is already stored) or, with `unlessFinished`, when the call has finished (nothing may
   * follow `call.finished`). An empty `dedupeKey` never dedupes. With `markRunning` a queued
   * call becomes `running` in the same round trip (a `call.started` event).
   */
  async appendEvent(
    leaseId: string,
    callId: string,
    body: EventBody,
    at: Date,
    dedupeKey = '',
    options: { unlessFinished?: boolean; markRunning?: boolean } = {},
  ): Promise<number | null> {
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
      options.markRunning ? '1' : '0',
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
   * Stores the final result once: the first result wins, later ones are ignored (returns null).
   * Appends the `receipt` event (when there is a receipt) and `call.finished`, atomically, and
   * returns the call's intent read in the same script (what the caller logs and counts).
   */
  async finishCall(
    leaseId: string,
    callId: string,
    result: ToolResult,
    at: Date,
    onlyIf: 'pending_approval' | null = null,
  ): Promise<CallIntent | null> {
    const events: EventBody[] = [];
    if (result.receipt) events.push({ type: 'receipt', receipt: result.receipt });
    events.push({ type: 'call.finished', status: result.status });
    const intent = (await this.redis.eval(
      FINISH_CALL,
      5,
      this.k.call(leaseId, callId),
      this.k.events(leaseId, callId),
      this.k.eventKeys(leaseId, callId),
      this.k.receipt(result.receipt?.receiptId ?? 'none'),
      this.k.approvals(),
      JSON.stringify(withoutOutput(result)),
      result.stdout,
      result.stderr,
      result.receipt ? JSON.stringify(result.receipt) : '',
      onlyIf ?? '',
      `${leaseId} ${callId}`,
      ...events.map((e) => eventJson(callId, e, at)),
      this.notifyChannel(leaseId, callId),
    )) as string | 0 | null;
    return typeof intent === 'string' ? CallIntent.parse(JSON.parse(intent)) : null;
  }

  /** Takes a call off the list of those waiting for approval (one the sweep found waiting no more). */
  async forgetApproval(leaseId: string, callId: string): Promise<void> {
    await this.redis.zrem(this.k.approvals(), `${leaseId} ${callId}`);
  }

  /** Queues a call waiting for approval (APPROVE_CALL): `approved`, `expired`, or the status it has (`''`: no call). */
  async approveCall(leaseId: string, callId: string, nowMs: number): Promise<string> {
    return (await this.redis.eval(
      APPROVE_CALL,
      2,
      this.k.call(leaseId, callId),
      this.k.approvals(),
      nowMs,
      `${leaseId} ${callId}`,
    )) as string;
  }

  /** Calls whose approval deadline passed by `nowMs`, every lease's (at most `limit`). */
  async dueApprovals(nowMs: number, limit = 100): Promise<Array<{ leaseId: string; callId: string }>> {
    const members = await this.redis.zrangebyscore(this.k.approvals(), '-inf', nowMs, 'LIMIT', 0, limit);
    return members.map((m) => ({ leaseId: m.split(' ')[0]!, callId: m.split(' ')[1]! }));
  }

  /** Calls waiting for approval, every lease's, soonest deadline first, from the `offset`th (at most `limit`), with their deadlines (epoch ms). */
  async pendingApprovals(offset: number, limit: number): Promise<Array<{ leaseId: string; callId: string; expiresAtMs: number }>> {
    const flat = await this.redis.zrange(this.k.approvals(), offset, offset + limit - 1, 'WITHSCORES');
    const pending: Array<{ leaseId: string; callId: string; expiresAtMs: number }> = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const [leaseId = '', callId = ''] = flat[i]!.split(' ');
      pending.push({ leaseId, callId, expiresAtMs: Number(flat[i + 1]) });
    }
    return pending;
  }

  /** Events with `seq` > `afterSeq`, in order. */
  async readEvents(leaseId: string, callId: string, afterSeq = 0): Promise<CallEvent[]> {
    const texts = await this.redis.lrange(this.k.events(leaseId, callId), afterSeq, -1);
    return texts.map((t) => CallEvent.parse(JSON.parse(t)));
  }

  async getReceipt(receiptId: string): Promise<EffectReceipt | null> {
    const text = await this.redis.get(this.k.receipt(receiptId));
    return text === null ? null : EffectReceipt.parse(JSON.parse(text));
  }

  /** Starts the retention clock of an ended lease's calls, events and receipts: they expire after `seconds`. */
  async retain(leaseId: string, seconds: number): Promise<void> {
    const callIds = await this.redis.zrange(this.k.calls(leaseId), 0, -1);
    const multi = this.redis.multi().expire(this.k.calls(leaseId), seconds);
    for (const callId of callIds) {
      multi
        .expire(this.k.call(leaseId, callId), seconds)
        .expire(this.k.events(leaseId, callId), seconds)
        .expire(this.k.eventKeys(leaseId, callId), seconds);
    }
    for (const callId of callIds) {
      const result = await this.redis.hget(this.k.call(leaseId, callId), 'result');
      const receiptId = result ? (JSON.parse(result) as { receipt?: { receiptId?: string } | null }).receipt?.receiptId : undefined;
      if (receiptId) multi.expire(this.k.receipt(receiptId), seconds);
    }
    await multi.exec();
  }
}

/**
 * A final result without its kept output, which the call's hash holds beside it (fields `stdout`
 * and `stderr`): up to `maxOutputBytes` per stream, and JSON would write each control
 * character of it as six bytes.
 */
function withoutOutput(result: ToolResult): Omit<ToolResult, 'stdout' | 'stderr'> {
  const { stdout: _stdout, stderr: _stderr, ...rest } = result;
  return rest;
}

/** A stored result with its output back from the hash (records from before the fields hold it in the JSON). */
function withOutput(json: unknown, hash: Record<string, string>): unknown {
  if (hash.stdout === undefined || json === null || typeof json !== 'object') return json;
  return { ...json, stdout: hash.stdout, stderr: hash.stderr ?? '' };
}

function eventJson(callId: string, body: EventBody, at: Date): string {
  // Starts with '{' so the scripts can splice `"seq":N,` in front; canonical for stable bytes.
  return canonicalJson({ ...body, at: at.toISOString(), callId });
}
