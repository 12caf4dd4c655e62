/**
 * The call service with fakes of its ports (an in-memory call store, the agent's queue, the
 * notifier): submit, cancel, waiting for a lease's calls, abandoning them.
 */
import { readFileSync } from 'node:fs';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { EventBody } from '../../contract/events.js';
import type { CallView, ToolResult } from '../../contract/objects.js';
import type { CallJob } from '../../contract/queue.js';
import { Policy } from '../policies/schema.js';
import { CallService, type CallLease, type CallServiceDeps } from './service.js';
import type { CallIntent } from './store.js';

const policy = Policy.parse(parseYaml(readFileSync(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));
const lease: CallLease = { id: 'sbx_unit', policySnapshot: policy, secrets: [], manifest: { digest: 'sha256:m' } as CallLease['manifest'] };

/** An in-memory call store that counts its reads, and a notifier that wakes waiters on `notify(channel)`. */
function fakes() {
  const calls = new Map<string, { intent: CallIntent; status: CallView['status']; result: ToolResult | null; events: EventBody[] }>();
  /** Each waiter says whether the message woke it (then it is gone). */
  const waiters = new Map<string, Array<(message: string) => boolean>>();
  const reads = { getCall: 0 };
  const notify = (channel: string, message = '1'): void => {
    const kept = (waiters.get(channel) ?? []).filter((waiter) => !waiter(message));
    if (kept.length > 0) waiters.set(channel, kept);
    else waiters.delete(channel);
  };
  const store: CallServiceDeps['store'] = {
    notifyChannel: (leaseId, callId) => `notify:${leaseId}:${callId}`,
    createCall: async (intent, events = [], _at, status = 'queued') => {
      const existing = calls.get(intent.callId);
      if (existing) return existing.intent;
      calls.set(intent.callId, { intent, status, result: null, events: [...events] });
      return null;
    },
    getCall: async (_leaseId, callId) => {
      reads.getCall += 1;
      const c = calls.get(callId);
      return c ? { ...c.intent, status: c.status, detached: null, result: c.result } : null;
    },
    traceOf: async (_leaseId, callId) => calls.get(callId)?.intent.trace,
    appendEvent: async (leaseId, callId, body, _at, dedupeKey = '', options = {}) => {
      const c = calls.get(callId)!;
      if (options.unlessFinished && c.status === 'finished') return null;
      if (options.markRunning && c.status === 'queued') c.status = 'running';
      if (dedupeKey && c.events.some((e) => (e as { key?: string }).key === dedupeKey)) return null;
      c.events.push({ ...body, ...(dedupeKey ? { key: dedupeKey } : {}) } as EventBody);
      notify(`notify:${leaseId}:${callId}`);
      return c.events.length;
    },
    finishCall: async (leaseId, callId, result, _at, onlyIf = null) => {
      const c = calls.get(callId)!;
      if (c.status === 'finished' || (onlyIf !== null && c.status !== onlyIf)) return null;
      Object.assign(c, { status: 'finished', result });
      notify(`notify:${leaseId}:${callId}`, 'finished');
      return c.intent;
    },
    markRunning: async (_leaseId, callId) => {
      const c = calls.get(callId)!;
      if (c.status === 'queued') c.status = 'running';
    },
    detachCall: async () => false,
    openCalls: async () => [...calls.values()].filter((c) => c.status !== 'finished').map((c) => c.intent.callId),
  };
  const notifier: CallServiceDeps['notifier'] = {
    next: (channel, timeoutMs, signal, accept) => notifier.nextOf([channel], timeoutMs, signal, accept),
    nextOf: (channels, timeoutMs, signal, accept) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        const done = (): void => (clearTimeout(timer), resolve());
        const waiter = (message: string): boolean => {
          if (accept && !accept(message)) return false;
          done();
          return true;
        };
        for (const ch of channels) waiters.set(ch, [...(waiters.get(ch) ?? []), waiter]);
        signal?.addEventListener('abort', done, { once: true });
      }),
  };
  // `markers` is the queued marker of contract/queue.ts: set by the first add, or by a take-back
  // before any; `attempted` are the calls whose attempt began (the agent's attempt marker).
  const sent = {
    enqueued: [] as CallJob[],
    cancels: [] as string[],
    queued: new Set<string>(),
    markers: new Map<string, 'waiting' | 'removed'>(),
    attempted: new Set<string>(),
  };
  const agent: CallServiceDeps['agent'] = {
    enqueue: async (_leaseId, job) => {
      if (sent.markers.has(job.callId)) return;
      sent.markers.set(job.callId, 'waiting');
      sent.enqueued.push(job);
      sent.queued.add(job.callId);
    },
    takeBack: async (_leaseId, callId) => {
      if (sent.attempted.has(callId)) return 'taken';
      const marker = sent.markers.get(callId);
      sent.markers.set(callId, 'removed');
      sent.queued.delete(callId);
      return marker ? 'removed' : 'absent';
    },
    requestCancel: async (_leaseId, callId) => void sent.cancels.push(callId),
  };
  const finished: string[] = [];
  const service = new CallService({
    store,
    agent,
    fetchArtifact: async () => {
      throw new Error('no artifacts in these tests');
    },
    notifier,
    artifacts: { writeChunk: async () => undefined, complete: async () => ({}) as never },
    metrics: { callFinished: (tool, status) => void finished.push(`${tool}:${status}`) },
    now: () => new Date(),
    log: pino({ level: 'silent' }),
  });
  return { service, calls, sent, reads, finished, store };
}

const exec = (callId: string, argv = ['true']) => ({ tool: 'exec', callId, args: { argv } });

describe('CallService.submit', () => {
  it('records the intent, then queues the job; the same callId and args again returns the call without a second job', async () => {
    const { service, calls, sent } = fakes();
    const first = await service.submit(lease, exec('c1'));
    expect(first).toMatchObject({ created: true, call: { callId: 'c1', status: 'queued', tool: 'exec' } });
    expect(calls.get('c1')!.events.map((e) => e.type)).toEqual(['call.accepted', 'call.queued']);
    expect(sent.enqueued.map((j) => [j.callId, j.manifestDigest])).toEqual([['c1', 'sha256:m']]);
    expect(await service.submit(lease, exec('c1'))).toMatchObject({ created: false, call: { callId: 'c1' } });
    expect(sent.enqueued).toHaveLength(1);
  });

  it('the same callId with other args is call.id_conflict; an unknown tool is input.unknown_tool; bad args are input.invalid', async () => {
    const { service } = fakes();
    await service.submit(lease, exec('c1'));
    await expect(service.submit(lease, exec('c1', ['false']))).rejects.toMatchObject({ code: 'call.id_conflict' });
    await expect(service.submit(lease, { tool: 'nope', args: {} })).rejects.toMatchObject({ code: 'input.unknown_tool' });
    await expect(service.submit(lease, { tool: 'exec', args: { argv: 'true' } })).rejects.toMatchObject({ code: 'input.invalid' });
  });

  it('a call the agent queue refuses ends failed (queue.unavailable) rather than waiting forever', async () => {
    const { service, calls } = fakes();
    (service as unknown as { deps: CallServiceDeps }).deps.agent.enqueue = async () => {
      throw new Error('redis down');
    };
    await expect(service.submit(lease, exec('c1'))).rejects.toMatchObject({ code: 'queue.unavailable' });
    expect(calls.get('c1')).toMatchObject({ status: 'finished', result: { status: 'failed' } });
  });

  it('when Redis is down for the enqueue and for ending the call too, the call is ended once it answers again (not left queued with no job)', async () => {
    const { service, calls, store } = fakes();
    const deps = (service as unknown as { deps: CallServiceDeps }).deps;
    deps.agent.enqueue = async () => {
      throw new Error('redis down');
    };
    // The outage: the first two attempts to end the call fail as the enqueue did.
    let outage = 2;
    const finishCall = store.finishCall.bind(store);
    store.finishCall = async (...args) => {
      if (outage-- > 0) throw new Error('redis down');
      return finishCall(...args);
    };
    await expect(service.submit(lease, exec('c1'))).rejects.toMatchObject({ code: 'queue.unavailable' });
    expect(calls.get('c1')?.status).toBe('queued');
    await expect.poll(() => calls.get('c1')?.status, { timeout: 5000 }).toBe('finished');
    expect(calls.get('c1')).toMatchObject({ result: { status: 'failed', error: { code: 'queue.unavailable' } } });
    expect(calls.get('c1')!.events.filter((e) => e.type === 'call.accepted')).toHaveLength(1);
  });

  it('an enqueue whose answer was lost after the job reached the queue: a job no agent took is taken back and the call ends failed; one an agent took is a submission that succeeded', async () => {
    const { service, calls, sent } = fakes();
    const deps = (service as unknown as { deps: CallServiceDeps }).deps;
    const enqueue = deps.agent.enqueue.bind(deps.agent);
    deps.agent.enqueue = async (leaseId, job) => {
      await enqueue(leaseId, job);
      throw new Error('connection lost');
    };
    await expect(service.submit(lease, exec('waiting'))).rejects.toMatchObject({ code: 'queue.unavailable' });
    expect(sent.queued.has('waiting')).toBe(false);
    expect(calls.get('waiting')).toMatchObject({ status: 'finished', result: { status: 'failed' } });
    deps.agent.takeBack = async () => 'taken';
    expect(await service.submit(lease, exec('taken'))).toMatchObject({ created: true, call: { callId: 'taken', status: 'queued' } });
  });
});

/** A submission of `callId` whose record is written and whose answer is lost (it throws): no job is added. */
async function submitRecordOnly(service: CallService, store: CallServiceDeps['store'], callId: string): Promise<void> {
  const createCall = store.createCall.bind(store);
  store.createCall = async (...args) => {
    await createCall(...args);
    throw new Error('connection lost');
  };
  await expect(service.submit(lease, exec(callId))).rejects.toThrow('connection lost');
  store.createCall = createCall;
}

describe('CallService.submit after a submission stopped between its record and its job', () => {
  it('a repeat of the submission (a client retry, or a Redis client resending the record whose answer was lost) queues the job, once', async () => {
    const { service, calls, sent, store } = fakes();
    await submitRecordOnly(service, store, 'c1');
    expect([calls.get('c1')?.status, sent.enqueued.length]).toEqual(['queued', 0]);

    expect(await service.submit(lease, exec('c1'))).toMatchObject({ created: false, call: { callId: 'c1', status: 'queued' } });
    expect(await service.submit(lease, exec('c1'))).toMatchObject({ created: false });
    expect(sent.enqueued.map((j) => j.callId)).toEqual(['c1']);
    expect(calls.get('c1')!.events.map((e) => e.type)).toEqual(['call.accepted', 'call.queued']);
  });

  it('a call cancelled before its job was added ends cancelled, and a submission arriving later adds no job', async () => {
    const { service, calls, sent, store } = fakes();
    await submitRecordOnly(service, store, 'c1');

    const { call } = await service.cancel(lease, 'c1');
    expect(call).toMatchObject({ status: 'finished', result: { status: 'cancelled', error: { code: 'execution.cancelled' } } });
    expect(await service.submit(lease, exec('c1'))).toMatchObject({ created: false, call: { status: 'finished' } });
    expect(sent.enqueued).toEqual([]);
    expect(calls.get('c1')!.events.map((e) => e.type)).toEqual(['call.accepted', 'call.cancel_requested']);
  });
});

describe('CallService.waitFinished', () => {
  it('wakes on the call’s end, not on each event before it: two reads of the call whatever the events', async () => {
    const { service, store, reads } = fakes();
    await service.submit(lease, exec('c1'));
    reads.getCall = 0;
    const waiting = service.waitFinished(lease.id, 'c1', 30_000);
    await new Promise((r) => setImmediate(r));
    await store.appendEvent(lease.id, 'c1', { type: 'call.started', attemptId: 'att_1', pid: 7 }, new Date(), 'att_1:1', {
      markRunning: true,
    });
    await store.appendEvent(lease.id, 'c1', { type: 'output', stream: 'stdout', offset: 0, dataBase64: 'aGk=' }, new Date(), 'att_1:2');
    await new Promise((r) => setImmediate(r));
    expect(reads.getCall).toBe(1);
    await store.finishCall(lease.id, 'c1', { callId: 'c1', status: 'succeeded' } as ToolResult, new Date());
    expect(await waiting).toMatchObject({ status: 'finished', result: { status: 'succeeded' } });
    expect(reads.getCall).toBe(2);
  });

  it('submitAndWait listens before the call is written: one read, after its end; a call it did not write is read first', async () => {
    const { service, store, reads, sent } = fakes();
    const waiting = service.submitAndWait(lease, exec('c1'), 30_000);
    await new Promise((r) => setImmediate(r));
    expect(sent.enqueued.map((j) => j.callId)).toEqual(['c1']);
    expect(reads.getCall).toBe(0);
    await store.finishCall(lease.id, 'c1', { callId: 'c1', status: 'succeeded' } as ToolResult, new Date());
    expect(await waiting).toMatchObject({ callId: 'c1', status: 'finished', result: { status: 'succeeded' } });
    expect(reads.getCall).toBe(1);
    // Submitted again: not written by this submission, so it is read (and it is finished).
    reads.getCall = 0;
    expect(await service.submitAndWait(lease, exec('c1'), 30_000)).toMatchObject({ status: 'finished' });
    expect(reads.getCall).toBeGreaterThan(0);
  });
});

describe('CallService.cancel', () => {
  it('a queued call comes off the queue and ends cancelled; one read of the call', async () => {
    const { service, sent, reads, finished } = fakes();
    await service.submit(lease, exec('c1'));
    reads.getCall = 0;
    const { call, changed } = await service.cancel(lease, 'c1');
    expect([changed, call.status, call.result?.status, call.result?.error?.code]).toEqual([
      true,
      'finished',
      'cancelled',
      'execution.cancelled',
    ]);
    expect(sent.cancels).toEqual([]);
    expect(reads.getCall).toBe(1);
    expect(finished).toEqual(['exec:cancelled']);
  });

  it('a running call is signalled to the agent and stays as it is until the agent reports', async () => {
    const { service, sent, reads, store } = fakes();
    await service.submit(lease, exec('c1'));
    sent.attempted.add('c1');
    await store.markRunning(lease.id, 'c1');
    reads.getCall = 0;
    const { call, changed } = await service.cancel(lease, 'c1');
    expect([changed, call.status, sent.cancels]).toEqual([true, 'running', ['c1']]);
    expect(reads.getCall).toBe(1);
  });

  it('a finished call is unchanged and the lease is not checked; an open one on an unusable lease throws the check’s error', async () => {
    const { service } = fakes();
    await service.submit(lease, exec('c1'));
    await service.cancel(lease, 'c1');
    const refuse = (): void => {
      throw Object.assign(new Error('no'), { code: 'lease.released' });
    };
    expect(await service.cancel(lease, 'c1', refuse)).toMatchObject({ changed: false, call: { status: 'finished' } });
    await service.submit(lease, exec('c2'));
    await expect(service.cancel(lease, 'c2', refuse)).rejects.toMatchObject({ code: 'lease.released' });
    await expect(service.cancel(lease, 'missing')).rejects.toMatchObject({ code: 'call.not_found' });
  });
});

describe('CallService.waitAllFinished', () => {
  it('resolves when the last open call finishes (on its notification), and at the deadline while calls stay open', async () => {
    const { service, store } = fakes();
    await service.submit(lease, exec('c1'));
    let resolved = false;
    const waiting = service.waitAllFinished(lease.id, Date.now() + 30_000).then(() => (resolved = true));
    await new Promise((r) => setImmediate(r));
    expect(resolved).toBe(false);
    const t0 = Date.now();
    await store.finishCall(lease.id, 'c1', { callId: 'c1', status: 'succeeded' } as ToolResult, new Date());
    await waiting;
    expect(Date.now() - t0).toBeLessThan(500);
    await service.submit(lease, exec('c2'));
    const deadline = Date.now() + 50;
    await service.waitAllFinished(lease.id, deadline);
    expect(Date.now()).toBeGreaterThanOrEqual(deadline);
  });
});

describe('CallService.abandonOpenCalls', () => {
  it('an open call whose attempt started ends effect_unknown with a receipt; one that never started ends cancelled without', async () => {
    const { service, calls } = fakes();
    await service.submit(lease, exec('started'));
    await service.submit(lease, exec('waiting'));
    await service.abandonOpenCalls(lease.id, 'sha256:m', async (callId) => (callId === 'started' ? 'att_1' : null));
    expect(calls.get('started')!.result).toMatchObject({
      status: 'effect_unknown',
      receipt: { attemptId: 'att_1', commitState: 'unknown', manifestDigest: 'sha256:m' },
    });
    expect(calls.get('waiting')!.result).toMatchObject({ status: 'cancelled', receipt: null });
  });
});
