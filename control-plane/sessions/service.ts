/**
 * Shell sessions (issue 13 part 2) over the calls: a session is its `session_start` call (a
 * background call whose shell lives until the call ends), a command is an `exec` call with
 * `session`, DELETE cancels the `session_start` call (the agent kills the shell's whole tree).
 * The policy's `sessions.max` is counted here (`session.limit_reached`, 429), the idle timeout is
 * enforced by the agent.
 */
import { randomBytes } from 'node:crypto';
import { AppError } from '../../contract/errors.js';
import type { CallView, ToolResult } from '../../contract/objects.js';
import { detachedStateOf, START_WAIT_MS, waitUntilRunning } from '../calls/detached-calls.js';
import type { CallLease, CallService } from '../calls/service.js';
import type { CreateSessionBody, SessionExecBody, SessionView } from './schema.js';
import type { SessionRecord, SessionStore } from './store.js';

/** How long a delete waits for the shell's tree to be gone, ms. */
const DELETE_WAIT_MS = 15_000;

export interface SessionServiceDeps {
  store: Pick<SessionStore, 'reserve' | 'release' | 'liveIds' | 'get' | 'list'>;
  calls: Pick<CallService, 'submit' | 'get' | 'waitFinished' | 'cancel'>;
  now: () => Date;
}

export class SessionService {
  constructor(private readonly deps: SessionServiceDeps) {}

  /**
   * Starts a session's shell and answers once it runs. Throws `session.limit_reached` (429) when
   * `sessions.max` run already, `policy.tool_denied` (exec disabled), or the start's own error
   * (`input.cwd_not_found`, `execution.spawn_failed`); nothing is left running then.
   */
  async create(lease: CallLease, body: CreateSessionBody): Promise<SessionView> {
    const { store, calls, now } = this.deps;
    const rules = lease.policySnapshot.sessions;
    await this.prune(lease.id);
    const sessionId = `ses_${randomBytes(16).toString('hex')}`;
    const record: SessionRecord = {
      sessionId,
      sandboxId: lease.id,
      callId: sessionId,
      cwd: body.cwd ?? null,
      createdAt: now().toISOString(),
    };
    if (!(await store.reserve(record, rules.max))) {
      throw new AppError('session.limit_reached', `this sandbox runs ${rules.max} sessions already (policy sessions.max)`, {
        details: { max: rules.max },
      });
    }
    try {
      await calls.submit(lease, {
        tool: 'session_start',
        callId: sessionId,
        args: { sessionId, ...(body.cwd ? { cwd: body.cwd } : {}), env: body.env ?? {}, idleTimeoutMs: rules.idleTimeoutSeconds * 1000 },
      });
    } catch (err) {
      await store.release(lease.id, sessionId);
      throw err;
    }
    const call = await waitUntilRunning(calls, lease.id, sessionId);
    if (call.status === 'finished' && call.result && call.result.status !== 'detached') {
      await store.release(lease.id, sessionId);
      const error = call.result.error;
      if (error && error.code !== 'execution.cancelled')
        throw new AppError(error.code as never, error.message, { details: { ...error.details, sessionId } });
    }
    return viewOf(record, call);
  }

  /** Throws `session.not_found`. */
  async get(leaseId: string, sessionId: string): Promise<SessionView> {
    const record = await this.record(leaseId, sessionId);
    return viewOf(record, await this.deps.calls.get(leaseId, record.callId));
  }

  /** Every session of the sandbox, oldest first, running and ended. */
  async list(leaseId: string): Promise<SessionView[]> {
    const records = await this.deps.store.list(leaseId);
    return Promise.all(records.map(async (r) => viewOf(r, await this.deps.calls.get(leaseId, r.callId))));
  }

  /**
   * Ends a session: its shell and every process it started are killed. Ending an ended session
   * changes nothing. Throws `session.not_found`.
   */
  async delete<L extends CallLease>(lease: L, sessionId: string, assertUsable: (lease: L) => void): Promise<SessionView> {
    const record = await this.record(lease.id, sessionId);
    await this.deps.calls.cancel(lease, record.callId, assertUsable);
    const call = await this.deps.calls.waitFinished(lease.id, record.callId, DELETE_WAIT_MS, true);
    if (call.status === 'finished') await this.deps.store.release(lease.id, sessionId);
    return viewOf(record, call);
  }

  /**
   * Submits one command of a running session (an `exec` call with `session`). Throws
   * `session.not_found`, `session.ended` (409), and what submitting an exec throws.
   */
  async exec(lease: CallLease, sessionId: string, body: SessionExecBody): Promise<CallView> {
    await this.assertRunning(lease.id, sessionId);
    const { callId, ...args } = body;
    const { call } = await this.deps.calls.submit(lease, {
      tool: 'exec',
      args: { ...args, session: sessionId },
      ...(callId ? { callId } : {}),
    });
    return call;
  }

  /** Throws `session.not_found` or `session.ended` unless the session runs now. */
  async assertRunning(leaseId: string, sessionId: string): Promise<void> {
    const view = await this.get(leaseId, sessionId);
    if (view.status === 'ended') {
      throw new AppError('session.ended', `session ${sessionId} has ended (${view.endedBy ?? 'ended'})`, {
        details: { sessionId, endedBy: view.endedBy },
      });
    }
  }

  private async record(leaseId: string, sessionId: string): Promise<SessionRecord> {
    const record = await this.deps.store.get(leaseId, sessionId);
    if (!record) throw new AppError('session.not_found', `no session ${sessionId} in sandbox ${leaseId}`, { details: { sessionId } });
    return record;
  }

  /**
   * Stops counting the sessions whose `session_start` call has finished (idle timeout, shell
   * exit, lease end), and those whose call never came; a session created within the start wait
   * is kept, its create may be submitting right now (a concurrent create gave its place away).
   */
  private async prune(leaseId: string): Promise<void> {
    const nowMs = this.deps.now().getTime();
    for (const id of await this.deps.store.liveIds(leaseId)) {
      const call = await this.deps.calls.get(leaseId, id).catch(() => null);
      if (call && call.status !== 'finished') continue;
      const record = call ? null : await this.deps.store.get(leaseId, id);
      if (record && nowMs - Date.parse(record.createdAt) <= START_WAIT_MS) continue;
      await this.deps.store.release(leaseId, id);
    }
  }
}

function viewOf(record: SessionRecord, call: CallView): SessionView {
  const finished = call.status === 'finished' ? call.result : null;
  const data = (finished?.data ?? null) as { endedBy?: string } | null;
  const { state, pid } = detachedStateOf(call);
  return {
    sessionId: record.sessionId,
    sandboxId: record.sandboxId,
    status: state,
    callId: record.callId,
    pid,
    cwd: record.cwd,
    createdAt: record.createdAt,
    endedBy: finished ? (data?.endedBy ?? finished.status) : null,
    result: finished as ToolResult | null,
  };
}
