/**
 * The sessions service with fakes of its ports (an in-memory session store, a calls port that
 * answers as the agent would): the policy's max, what a start that failed leaves, commands of an
 * ended session, and the view of a session through its `session_start` call.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { CallView, ToolResult } from '../../contract/objects.js';
import { errorInfo } from '../../contract/errors.js';
import { Policy } from '../policies/schema.js';
import type { CallLease } from '../calls/service.js';
import { SessionService, type SessionServiceDeps } from './service.js';
import type { SessionRecord } from './store.js';

const base = Policy.parse(parseYaml(readFileSync(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));
const leaseWith = (max: number): CallLease => ({
  id: 'sbx_unit',
  policySnapshot: { ...base, sessions: { max, idleTimeoutSeconds: 60 } },
  secrets: [],
  manifest: { digest: 'sha256:m' } as CallLease['manifest'],
});

function result(callId: string, status: ToolResult['status'], data: unknown = null, error: ToolResult['error'] = null): ToolResult {
  return {
    callId,
    status,
    error,
    modelText: '',
    exitCode: null,
    signal: null,
    stdout: '',
    stderr: '',
    truncation: null,
    data,
    artifacts: [],
    receipt: null,
  } as ToolResult;
}

/**
 * `startAs`: what the agent makes of a session_start (detached: running; a result: it ended at
 * once); `submitGate`: resolves when a submit may go through (default at once).
 */
function fakes(startAs: 'detached' | ToolResult['error'], submitGate: Promise<void> = Promise.resolve()) {
  const records = new Map<string, SessionRecord>();
  const live = new Set<string>();
  const calls = new Map<string, CallView>();
  const submitted: Array<{ tool: string; args: Record<string, unknown> }> = [];
  const store: SessionServiceDeps['store'] = {
    reserve: async (record, max) => {
      if (live.size >= max) return false;
      records.set(record.sessionId, record);
      live.add(record.sessionId);
      return true;
    },
    release: async (_l, id) => void live.delete(id),
    liveIds: async () => [...live],
    get: async (_l, id) => records.get(id) ?? null,
    list: async () => [...records.values()],
  };
  const view = (callId: string, tool: string, args: Record<string, unknown>): CallView =>
    ({
      callId,
      leaseId: 'sbx_unit',
      tool,
      args,
      fingerprint: 'sha256:f',
      status: 'queued',
      createdAt: new Date().toISOString(),
      detached: null,
      result: null,
    }) as CallView;
  const port: SessionServiceDeps['calls'] = {
    submit: async (_lease, body) => {
      await submitGate;
      submitted.push({ tool: body.tool, args: body.args });
      const callId = body.callId ?? `call_${submitted.length}`;
      const v = view(callId, body.tool, body.args);
      if (body.tool === 'session_start') {
        if (startAs === 'detached')
          Object.assign(v, { status: 'detached', detached: result(callId, 'detached', { taskId: callId, pid: 42 }) });
        else Object.assign(v, { status: 'finished', result: result(callId, 'failed', null, startAs) });
      }
      calls.set(callId, v);
      return { call: v, created: true };
    },
    get: async (_l, id) => calls.get(id)!,
    waitFinished: async (_l, id) => calls.get(id)!,
    cancel: async (_lease, id) => {
      const v = calls.get(id)!;
      Object.assign(v, { status: 'finished', result: result(id, 'cancelled', { sessionId: id, endedBy: 'deleted' }) });
      return { call: v, changed: true };
    },
  };
  return { service: new SessionService({ store, calls: port, now: () => new Date() }), submitted, live };
}

describe('SessionService', () => {
  it('starts a session as a session_start call with the policy idle timeout, and answers it running with its pid', async () => {
    const { service, submitted } = fakes('detached');
    const s = await service.create(leaseWith(2), { cwd: '/workspace' });
    expect(s).toMatchObject({ status: 'running', pid: 42, cwd: '/workspace', endedBy: null });
    expect(submitted[0]).toEqual({
      tool: 'session_start',
      args: { sessionId: s.sessionId, cwd: '/workspace', env: {}, idleTimeoutMs: 60_000 },
    });
  });

  it('a place taken by a create still submitting is not given away by a create at the same time (429)', async () => {
    let submit!: () => void;
    const { service, live } = fakes('detached', new Promise<void>((resolve) => (submit = resolve)));
    const first = service.create(leaseWith(1), {});
    await expect.poll(() => live.size).toBe(1);
    // Its call does not exist yet: the second create's prune must not take it for one that never came.
    await expect(service.create(leaseWith(1), {})).rejects.toMatchObject({ code: 'session.limit_reached', status: 429 });
    submit();
    await expect(first).resolves.toMatchObject({ status: 'running' });
  });

  it('refuses past sessions.max with session.limit_reached (429) and submits nothing', async () => {
    const { service, submitted } = fakes('detached');
    await service.create(leaseWith(1), {});
    await expect(service.create(leaseWith(1), {})).rejects.toMatchObject({ code: 'session.limit_reached', status: 429 });
    expect(submitted).toHaveLength(1);
  });

  it("a start that failed gives back its place and throws the agent's error", async () => {
    const { service, live } = fakes(errorInfo('input.cwd_not_found', 'cwd does not exist: /nope'));
    await expect(service.create(leaseWith(1), { cwd: '/nope' })).rejects.toMatchObject({ code: 'input.cwd_not_found' });
    expect(live.size).toBe(0);
  });

  it('a deleted session is ended (deleted), frees its place, and its commands are session.ended (409)', async () => {
    const { service, live } = fakes('detached');
    const lease = leaseWith(1);
    const s = await service.create(lease, {});
    const ended = await service.delete(lease, s.sessionId, () => undefined);
    expect(ended).toMatchObject({ status: 'ended', endedBy: 'deleted' });
    expect(live.size).toBe(0);
    await expect(service.exec(lease, s.sessionId, { cmd: 'true' })).rejects.toMatchObject({ code: 'session.ended', status: 409 });
    await expect(service.get('sbx_unit', 'ses_unknown')).rejects.toMatchObject({ code: 'session.not_found', status: 404 });
  });
});
