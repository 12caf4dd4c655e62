/**
 * The call path from the control plane to an agent (contract/queue.ts `inbox`) against the real
 * Redis: the control plane's side (control-plane/agent-link/calls-out.ts) adds calls and takes
 * them back, the agent's (sandbox-agent/link/inbox.ts, link/attempt-start.ts) reads them through
 * its consumer group. A call is added once per callId; one taken back before its attempt began
 * never runs and one whose attempt began cannot be taken back; entries reach their handlers in
 * stream order with at most `capacity` calls at once and leave the stream once handled; what a
 * handler failed on, or an agent left behind, is handed to the next; a binding is handled before
 * the calls after it; the depth counts what waits and what was handed over. Handlers here are
 * promises the test settles, so no step waits on time.
 */
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { INBOX_FIELDS, leaseKeys, type CallJob } from '../contract/queue.js';
import { CallsOut } from '../control-plane/agent-link/calls-out.js';
import { connectRedis, type Redis } from '../control-plane/redis/connections.js';
import { redisBeginAttempt } from '../sandbox-agent/link/attempt-start.js';
import { Inbox, redisInboxConnection, type InboxHandlers } from '../sandbox-agent/link/inbox.js';
import { eventually, testIdentity, useRedisPrefix } from './fixtures/index.js';

const { prefix } = testIdentity('inbox');
const shared = useRedisPrefix(prefix);
let redis: Redis;
let out: CallsOut;

beforeAll(() => {
  redis = shared.redis();
  out = new CallsOut(redis, prefix);
});

function newLease(): string {
  return `sbx_${randomBytes(10).toString('hex')}`;
}

function job(callId: string): CallJob {
  return {
    callId,
    tool: 'exec',
    toolVersion: '1',
    args: { argv: ['true'] },
    fingerprint: 'f',
    manifestDigest: 'sha256:m',
    timeoutMs: 1000,
    maxOutputBytes: 1024,
    accesses: [],
  };
}

/** A handler whose calls the test ends: `started` lists the callIds handed over, `finish(id)` settles one. */
function controlledCalls(): InboxHandlers & { started: string[]; bound: unknown[]; finish(id: string, fail?: boolean): void } {
  const pending = new Map<string, { resolve(): void; reject(e: Error): void }>();
  const started: string[] = [];
  const bound: unknown[] = [];
  return {
    started,
    bound,
    call: (message) =>
      new Promise<boolean>((resolve, reject) => {
        const { callId } = message as CallJob;
        started.push(callId);
        pending.set(callId, { resolve: () => resolve(true), reject });
      }),
    bind: async (message) => void bound.push(message),
    finish(id, fail = false) {
      const p = pending.get(id)!;
      pending.delete(id);
      if (fail) p.reject(new Error('return path down'));
      else p.resolve();
    },
  };
}

/** Resolves once `calls` was handed `count` calls. */
async function untilStarted(calls: { started: string[] }, count: number): Promise<void> {
  await eventually(
    () => calls.started.length,
    (n) => n === count,
  );
}

/** An agent's inbox on `leaseId` with its own blocking connection, and its stop (also run when the test finishes). */
async function agentInbox(leaseId: string, handlers: InboxHandlers, capacity = 16): Promise<() => Promise<void>> {
  const reader = connectRedis(shared.options);
  const inbox = new Inbox(
    redisInboxConnection(redis, reader, leaseKeys(prefix, leaseId).inbox),
    handlers,
    capacity,
    pino({ level: 'silent' }),
  );
  await inbox.start();
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    if (!stopped) {
      stopped = inbox.stop();
      reader.disconnect();
    }
    return stopped;
  };
  onTestFinished(stop);
  return stop;
}

describe('the inbox: calls from the control plane to the agent', () => {
  it('a call added twice is one entry and runs once; it leaves the stream once handled', async () => {
    const lease = newLease();
    await out.enqueue(lease, job('call_a'));
    await out.enqueue(lease, job('call_a'));
    expect(await redis.xlen(leaseKeys(prefix, lease).inbox)).toBe(1);
    const calls = controlledCalls();
    await agentInbox(lease, calls);
    await untilStarted(calls, 1);
    expect(await out.depth([lease])).toEqual({ waiting: 0, active: 1 });
    calls.finish('call_a');
    await eventually(
      () => redis.xlen(leaseKeys(prefix, lease).inbox),
      (n) => n === 0,
    );
    expect(calls.started).toEqual(['call_a']);
    expect(await out.depth([lease])).toEqual({ waiting: 0, active: 0 });
  });

  it('a call taken back before its attempt began does not start; one whose attempt began is taken', async () => {
    const lease = newLease();
    const keys = leaseKeys(prefix, lease);
    const begin = redisBeginAttempt((script, numKeys, ...args) => redis.eval(script, numKeys, ...args), keys);
    await out.enqueue(lease, job('call_back'));
    await out.enqueue(lease, job('call_run'));
    expect(await out.depth([lease])).toEqual({ waiting: 2, active: 0 });

    expect(await out.takeBack(lease, 'call_back')).toBe('removed');
    // A second take-back answers the same: the call stays taken back.
    expect(await out.takeBack(lease, 'call_back')).toBe('removed');
    expect(await begin('call_back', 'att_1')).toBe('removed');
    expect(await redis.exists(keys.attempt('call_back'))).toBe(0);

    expect(await begin('call_run', 'att_2')).toBe('claimed');
    expect(await out.takeBack(lease, 'call_run')).toBe('taken');
    expect(await begin('call_run', 'att_3')).toBe('attempted');

    // Taking back a call never added answers `absent` and keeps its add from coming later.
    expect(await out.takeBack(lease, 'call_never_added')).toBe('absent');
    await out.enqueue(lease, job('call_never_added'));
    expect(await redis.get(keys.queued('call_never_added'))).toBe('removed');
    const entries = await redis.xrange(keys.inbox, '-', '+');
    expect(entries.filter(([, fields]) => fields.join(' ').includes('call_never_added'))).toEqual([]);
  });

  it('an attempt naming a secret marked withdrawn does not start; marking again replaces the set', async () => {
    const lease = newLease();
    const keys = leaseKeys(prefix, lease);
    const begin = redisBeginAttempt((script, numKeys, ...args) => redis.eval(script, numKeys, ...args), keys);
    await out.markWithdrawnSecrets(lease, ['NPM_TOKEN', 'GH_TOKEN']);
    expect(await begin('call_w', 'att_1', ['API_KEY', 'GH_TOKEN'])).toBe('withdrawn:GH_TOKEN');
    expect(await redis.exists(keys.attempt('call_w'))).toBe(0);
    expect(await begin('call_plain', 'att_2', ['API_KEY'])).toBe('claimed');
    expect(await begin('call_none', 'att_3')).toBe('claimed');
    // A later change allows GH_TOKEN again: only NPM_TOKEN stays withdrawn.
    await out.markWithdrawnSecrets(lease, ['NPM_TOKEN']);
    expect(await begin('call_w', 'att_4', ['API_KEY', 'GH_TOKEN'])).toBe('claimed');
    await out.markWithdrawnSecrets(lease, []);
    expect(await redis.exists(keys.withdrawn)).toBe(0);
  });

  it('at most `capacity` calls are handed over at once, in stream order', async () => {
    const lease = newLease();
    for (const id of ['c1', 'c2', 'c3', 'c4', 'c5']) await out.enqueue(lease, job(id));
    const calls = controlledCalls();
    await agentInbox(lease, calls, 2);
    await untilStarted(calls, 2);
    expect(calls.started).toEqual(['c1', 'c2']);
    expect(await out.depth([lease])).toEqual({ waiting: 3, active: 2 });
    calls.finish('c2');
    await untilStarted(calls, 3);
    expect(calls.started).toEqual(['c1', 'c2', 'c3']);
    for (const id of ['c1', 'c3']) calls.finish(id);
    await untilStarted(calls, 5);
    expect(calls.started).toEqual(['c1', 'c2', 'c3', 'c4', 'c5']);
    for (const id of ['c4', 'c5']) calls.finish(id);
    await eventually(
      () => out.depth([lease]),
      (d) => d.waiting === 0 && d.active === 0,
    );
  });

  it('an entry a handler failed on, or an agent stopped before handling, is handed to the next agent', async () => {
    const lease = newLease();
    for (const id of ['f1', 'f2']) await out.enqueue(lease, job(id));
    const first = controlledCalls();
    const stopFirst = await agentInbox(lease, first);
    await untilStarted(first, 2);
    // f1's result could not be sent; f2 is still running when its agent goes away.
    first.finish('f1', true);
    const stopping = stopFirst();
    first.finish('f2', true);
    await stopping;
    expect(await out.depth([lease])).toEqual({ waiting: 0, active: 2 });

    const next = controlledCalls();
    await agentInbox(lease, next);
    await untilStarted(next, 2);
    expect(next.started).toEqual(['f1', 'f2']);
    for (const id of ['f1', 'f2']) next.finish(id);
    await eventually(
      () => redis.xlen(leaseKeys(prefix, lease).inbox),
      (n) => n === 0,
    );
  });

  it('an entry whose handler failed is read again by the same agent after a pause, with no reconnect', async () => {
    const lease = newLease();
    await out.enqueue(lease, job('again'));
    const calls = controlledCalls();
    await agentInbox(lease, calls);
    await untilStarted(calls, 1);
    calls.finish('again', true);
    await untilStarted(calls, 2);
    calls.finish('again');
    await eventually(
      () => redis.xlen(leaseKeys(prefix, lease).inbox),
      (n) => n === 0,
    );
    expect(calls.started).toEqual(['again', 'again']);
  });

  it('entries an earlier agent left wait for a free slot like new ones', async () => {
    const lease = newLease();
    for (const id of ['l1', 'l2', 'l3', 'l4']) await out.enqueue(lease, job(id));
    const first = controlledCalls();
    const stopFirst = await agentInbox(lease, first);
    await untilStarted(first, 4);
    const stopping = stopFirst();
    for (const id of ['l1', 'l2', 'l3', 'l4']) first.finish(id, true);
    await stopping;

    const next = controlledCalls();
    await agentInbox(lease, next, 2);
    await untilStarted(next, 2);
    expect(await out.depth([lease])).toEqual({ waiting: 0, active: 4 });
    expect(next.started).toEqual(['l1', 'l2']);
    next.finish('l1');
    await untilStarted(next, 3);
    expect(next.started).toEqual(['l1', 'l2', 'l3']);
    for (const id of ['l2', 'l3']) next.finish(id);
    await untilStarted(next, 4);
    next.finish('l4');
  });

  it('a consumer group that disappeared is made again and its calls still arrive', async () => {
    const lease = newLease();
    const inbox = leaseKeys(prefix, lease).inbox;
    const calls = controlledCalls();
    await agentInbox(lease, calls);
    // As a Redis that lost the group would have it (the blocked read is answered with NOGROUP).
    await redis.xgroup('DESTROY', inbox, 'agent');
    await out.enqueue(lease, job('regrouped'));
    await untilStarted(calls, 1);
    calls.finish('regrouped');
  });

  it('a binding is handled before the calls after it; an entry that is neither is dropped and the next runs', async () => {
    const lease = newLease();
    const inbox = leaseKeys(prefix, lease).inbox;
    await out.sendBinding(lease, { env: { A: '1' }, secrets: { grants: [], deliveryKey: null } });
    await redis.xadd(inbox, '*', INBOX_FIELDS.kind, 'nonsense', INBOX_FIELDS.message, '{}');
    await redis.xadd(inbox, '*', INBOX_FIELDS.kind, 'call', INBOX_FIELDS.message, 'not json');
    await out.enqueue(lease, job('after_bind'));
    const calls = controlledCalls();
    const originalCall = calls.call;
    let boundWhenCalled = -1;
    calls.call = (message) => {
      boundWhenCalled = calls.bound.length;
      return originalCall(message);
    };
    await agentInbox(lease, calls);
    await untilStarted(calls, 1);
    expect(calls.bound).toEqual([{ env: { A: '1' }, secrets: { grants: [], deliveryKey: null } }]);
    expect(boundWhenCalled).toBe(1);
    calls.finish('after_bind');
    await eventually(
      () => redis.xlen(inbox),
      (n) => n === 0,
    );
  });

  it('a call added while the agent waits on its blocking read is handed over at once', async () => {
    const lease = newLease();
    const calls = controlledCalls();
    await agentInbox(lease, calls);
    await out.enqueue(lease, job('late'));
    await untilStarted(calls, 1);
    calls.finish('late');
  });
});
