/**
 * Tool calls: intent in, receipt out. Submitting validates and resolves the call against the
 * lease's policy, records the intent in the call store and only then enqueues it for the agent;
 * what the agent sends back (events, the result with its receipt) is ledgered here before the
 * queue job is acknowledged.
 */
import { resultWithoutRun } from '../../contract/receipts.js';
import type { Logger } from 'pino';
import { ZodError } from 'zod';
import { digestOf } from '../../contract/digest.js';
import { AppError, errorInfo } from '../../contract/errors.js';
import type { CallView, ToolResult } from '../../contract/objects.js';
import type { EventBody } from '../../contract/events.js';
import type { CallJob, ReturnMessage } from '../../contract/queue.js';
import type { AgentSpan, SpanContextIds } from '../../contract/trace.js';
import { isOfferedAsCall } from '../../contract/tools.js';
import type { CallsOut } from '../agent-link/calls-out.js';
import type { ArtifactFetcher } from '../artifacts/fetch.js';
import type { ArtifactStore } from '../artifacts/store.js';
import type { LeaseRecord } from '../leases/store.js';
import type { Metrics } from '../metrics/service.js';
import type { Notifier } from '../redis/notifier.js';
import type { Tracing } from '../telemetry/tracing.js';
import type { CredentialsInjected } from '../../contract/egress.js';
import type { SubmitCallBody } from './schema.js';
import { abandonedResult } from './abandon.js';
import { agentTraceOf, callTraceOf, recordCallSpans } from './call-trace.js';
import { decideApproval } from './approvals.js';
import { settleBehindAnswer } from './settle.js';
import { listenForEnd, waitAllFinished, waitFinished } from './waiting.js';
import { denyWithdrawnSecrets } from './withdrawn.js';
import { ingestArtifact } from './artifact-ingest.js';
import type { CallStore } from './store.js';
import { jobOf, newCallId } from './job.js';
import { TOOLS } from './tools.js';

/** What calls need of a lease: its id, policy, granted secrets and manifest. */
export type CallLease = Pick<LeaseRecord, 'id' | 'policySnapshot' | 'secrets' | 'manifest'>;

export interface CallServiceDeps {
  store: Pick<
    CallStore,
    'createCall' | 'getCall' | 'traceOf' | 'appendEvent' | 'finishCall' | 'markRunning' | 'detachCall' | 'openCalls' | 'notifyChannel'
  >;
  artifacts: Pick<ArtifactStore, 'writeChunk' | 'complete'>;
  /** Fetches an artifact the agent announced (`artifact_ready`) over a transfer tunnel and stores it (artifacts/fetch.ts). */
  fetchArtifact: ArtifactFetcher['fetch'];
  /** The calls half of the agent link: the producer, cancel markers. */
  agent: Pick<CallsOut, 'enqueue' | 'takeBack' | 'requestCancel'>;
  notifier: Pick<Notifier, 'next' | 'nextOf'>;
  /** The egress proxy's side: each call's proxy credential (egress/attribution.ts), the secrets injected into its requests. */
  egress?: {
    credential(leaseId: string, callId: string): string;
    injectedInto(leaseId: string, callId: string): Promise<CredentialsInjected>;
  };
  /** Each call's `execute_tool` span and its agent's phases (call-trace.ts); absent: not traced. */
  tracing?: Pick<Tracing, 'child' | 'record'>;
  /** Counts calls reaching a terminal result, and how long they took from submission. */
  metrics: Pick<Metrics, 'callFinished'>;
  now: () => Date;
  log: Logger;
}

/** The names `input.unknown_tool` lists: the tools a client may submit (not the `internal` ones). */
const OFFERED_TOOLS = [...TOOLS.values()].filter((t) => isOfferedAsCall(t.spec)).map((t) => t.name);

export class CallService {
  constructor(private readonly deps: CallServiceDeps) {}

  /**
   * Submits a call. Returns `{call, created}`; `created` is false when the callId existed with
   * the same fingerprint (the earlier call is returned, nothing runs twice). Throws
   * `input.unknown_tool`, `input.invalid` (details.issues with paths under `args`),
   * `call.id_conflict`, `policy.tool_denied`, `policy.secret_denied` (a secret the lease was
   * not granted) — a denial is recorded as the call's result. An `internal` tool (a session's
   * shell, a terminal) is submitted here by its own service; the calls route refuses it.
   * `parent`: the trace context of the request (its `traceparent`), the parent of the call's span.
   */
  async submit(lease: CallLease, body: SubmitCallBody, parent?: SpanContextIds): Promise<{ call: CallView; created: boolean }> {
    const { store, now } = this.deps;
    const tool = TOOLS.get(body.tool);
    if (!tool) throw new AppError('input.unknown_tool', `no tool named ${body.tool}`, { details: { field: 'tool', known: OFFERED_TOOLS } });
    const callId = body.callId ?? newCallId();
    let resolved;
    let denial: AppError | null = null;
    try {
      resolved = tool.resolve(body.args, lease.policySnapshot, lease.secrets);
    } catch (err) {
      if (err instanceof ZodError) {
        // An issue of `args` itself (an unknown key) has an empty path: it is named `args`.
        const issues = err.issues.map((i) => ({ path: ['args', ...i.path.map(String)].join('.'), message: i.message }));
        throw new AppError('input.invalid', `invalid args for ${tool.name}: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, {
          details: { issues },
        });
      }
      if (!(err instanceof AppError)) throw err;
      denial = err;
    }
    // The policy's tool rules on the resolved call (approvals.ts): deny it, or hold it for an approver.
    const ruling = resolved
      ? decideApproval(lease.policySnapshot.tools.approvals, { spec: tool.spec, args: resolved.args, accesses: resolved.accesses })
      : null;
    if (ruling?.decision === 'deny')
      denial = new AppError('policy.tool_denied', `the policy's ${ruling.rule} denies this call`, {
        details: { tool: tool.name, rule: ruling.rule },
      });
    const normalizedArgs = resolved?.args ?? body.args;
    const fingerprint = digestOf({ tool: tool.name, version: tool.version, args: normalizedArgs });
    const createdAt = now();
    const intent = { callId, leaseId: lease.id, tool: tool.name, args: normalizedArgs, fingerprint, createdAt: createdAt.toISOString() };
    const trace = callTraceOf(this.deps.tracing, parent ?? null);
    const untraced = resolved ? jobOf(lease.manifest!.digest, tool, callId, fingerprint, resolved) : null;
    const job: CallJob | null = untraced && { ...untraced, ...agentTraceOf(trace) };
    // The intent and its call.accepted event are written in one round trip.
    const asks = ruling?.decision === 'ask' && denial === null;
    const approvalExpiresAt = new Date(createdAt.getTime() + (lease.policySnapshot.tools.approvals?.timeoutSeconds ?? 3600) * 1000);
    const events: EventBody[] = [{ type: 'call.accepted', tool: tool.name, fingerprint }];
    if (asks) events.push({ type: 'call.pending_approval', rule: ruling.rule, fingerprint, expiresAt: approvalExpiresAt.toISOString() });
    const record = { ...intent, trace }; // the span's ids are kept with the intent, never shown in the view
    const existing = await store.createCall(record, events, createdAt, asks ? 'pending_approval' : 'queued', approvalExpiresAt.getTime());
    if (existing) {
      if (existing.fingerprint !== fingerprint) {
        throw new AppError('call.id_conflict', `callId ${callId} was used with different tool or arguments`, {
          details: { callId, fingerprint: existing.fingerprint },
        });
      }
      const call = await this.get(lease.id, callId);
      // The first submission may have stopped between its record and its job: its answer lost
      // in a Redis outage (the client's retry, or the Redis client's own resend of the record,
      // lands here) or its control plane gone. The repeat finishes it. The add is once per
      // callId and a taken-back call stays taken back, so nothing runs twice.
      if (call.status === 'queued' && untraced && !denial) await this.queue(lease.id, { ...untraced, ...agentTraceOf(existing.trace) });
      return { call, created: false };
    }
    if (denial || !job) {
      const error = denial!.toInfo();
      await settleBehindAnswer(this.deps.log, { sandboxId: lease.id, callId }, async () => {
        await store.appendEvent(lease.id, callId, { type: 'call.denied', error }, createdAt, 'denied');
        await this.finish(lease.id, callId, resultWithoutRun(callId, 'denied', error), createdAt);
      });
      throw new AppError(denial!.code, denial!.message, { details: { ...denial!.details, callId } });
    }
    if (asks) {
      // Nothing is queued until an approver says so (approval-service.ts).
      return { call: { ...intent, status: 'pending_approval', detached: null, result: null }, created: true };
    }
    // The intent is in the store before the job exists: a crash here leaves a queued call that
    // a repeat of the submission queues and a release finishes as `cancelled` (no attempt
    // marker), never a job without a record.
    await this.queue(lease.id, job);
    this.deps.log.debug({ sandboxId: lease.id, callId, tool: tool.name }, 'call queued');
    // As it was when queued, not read again: a caller that waits (`waitFinished`) reads it anyway.
    return { call: { ...intent, status: 'queued', detached: null, result: null }, created: true };
  }

  /**
   * Adds a recorded call's job to the lease's inbox (a no-op when it was added or taken back
   * before) and appends its `call.queued` event once. Throws `queue.unavailable` when the add
   * failed and the call was ended for it (abandonUnqueued); resolves when the job reached an
   * agent after all.
   */
  private async queue(leaseId: string, job: CallJob): Promise<void> {
    const { store, agent, now } = this.deps;
    const credential = this.deps.egress?.credential(leaseId, job.callId);
    try {
      await agent.enqueue(leaseId, credential === undefined ? job : { ...job, egressCredential: credential });
    } catch (err) {
      // Not queued means never run: the call ends here rather than waiting forever.
      const error = errorInfo('queue.unavailable', `the call could not be queued: ${(err as Error).message}`);
      const taken = await settleBehindAnswer(this.deps.log, { sandboxId: leaseId, callId: job.callId }, () =>
        this.abandonUnqueued(leaseId, job.callId, error),
      );
      if (taken !== true) throw new AppError('queue.unavailable', error.message, { details: { callId: job.callId }, cause: err });
    }
    await store.appendEvent(leaseId, job.callId, { type: 'call.queued' }, now(), 'queued', { unlessFinished: true });
  }

  /**
   * Queues a call an approver let run (approval-service.ts), resolved again under the lease's
   * policy now: a call that no longer resolves, or whose fingerprint the resolution changes, ends
   * `denied` instead — an approval binds the effect that was approved, nothing else.
   */
  async runApproved(lease: CallLease, call: CallView): Promise<void> {
    const tool = TOOLS.get(call.tool)!;
    let job: CallJob;
    try {
      const resolved = tool.resolve(call.args, lease.policySnapshot, lease.secrets);
      if (digestOf({ tool: tool.name, version: tool.version, args: resolved.args }) !== call.fingerprint)
        throw new AppError('policy.tool_denied', 'the call resolves to another effect under the policy now than the one approved');
      job = jobOf(lease.manifest!.digest, tool, call.callId, call.fingerprint, resolved);
      if (this.deps.tracing) job = { ...job, ...agentTraceOf(await this.deps.store.traceOf(lease.id, call.callId)) };
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      await this.finish(lease.id, call.callId, resultWithoutRun(call.callId, 'denied', err.toInfo()), this.deps.now());
      return;
    }
    await this.queue(lease.id, job);
  }

  /** Ends a call still waiting for approval as `denied` with `error` (false: it no longer waited). */
  async endWaiting(leaseId: string, callId: string, error: ReturnType<typeof errorInfo>): Promise<boolean> {
    return this.finish(leaseId, callId, resultWithoutRun(callId, 'denied', error), this.deps.now(), 'pending_approval');
  }

  /** Ends a call no agent has taken yet as `denied` with `error`, taking its job back (false: it started, or had finished). */
  async denyUnstarted(leaseId: string, callId: string, error: ReturnType<typeof errorInfo>): Promise<boolean> {
    if ((await this.deps.agent.takeBack(leaseId, callId)) === 'taken') return false;
    return this.finish(leaseId, callId, resultWithoutRun(callId, 'denied', error), this.deps.now());
  }

  /** Ends denied the lease's calls not started yet that name a secret outside `allowed` (withdrawn.ts); their ids. */
  denyWithdrawnSecrets(leaseId: string, allowed: readonly string[]): Promise<string[]> {
    return denyWithdrawnSecrets(this, leaseId, allowed);
  }

  /** Throws `call.not_found`. */
  async get(leaseId: string, callId: string): Promise<CallView> {
    const call = await this.deps.store.getCall(leaseId, callId);
    if (!call) throw new AppError('call.not_found', `no call ${callId} in sandbox ${leaseId}`, { details: { callId } });
    return call;
  }

  /**
   * The call once finished, detached (a background task's handle; with `untilFinished`, only
   * once finished) or waiting for approval, or as it is after `timeoutMs` (waiting.ts).
   */
  waitFinished(leaseId: string, callId: string, timeoutMs: number, untilFinished = false): Promise<CallView> {
    return waitFinished({ ...this.deps, get: (l, c) => this.get(l, c) }, leaseId, callId, timeoutMs, untilFinished);
  }

  /**
   * `submit`, then `waitFinished` up to `waitMs`: the wait listens before the call is written, so
   * a call this submission queued is not read back before its first notification (one Redis
   * round trip less per waited call). Throws as `submit`.
   */
  async submitAndWait(lease: CallLease, body: SubmitCallBody, waitMs: number, parent?: SpanContextIds): Promise<CallView> {
    const callId = body.callId ?? newCallId();
    const early = listenForEnd(this.deps, lease.id, callId, waitMs);
    try {
      const { call, created } = await this.submit(lease, { ...body, callId }, parent);
      // Only a call written just now as queued is known without a read; any other is read as usual.
      const known = created && call.status === 'queued' ? { wait: early, call } : undefined;
      if (!known) early.stop();
      return await waitFinished({ ...this.deps, get: (l, c) => this.get(l, c) }, lease.id, callId, waitMs, false, known);
    } catch (err) {
      early.stop();
      throw err;
    }
  }

  /**
   * Cancels a call: a queued call is taken off the queue and finishes `cancelled` with nothing
   * run; a running one is signalled (the agent kills its process group and reports). Cancelling
   * a finished call changes nothing (`changed: false`), whatever the lease's state; else
   * `assertUsable(lease)` runs first (it throws when the lease may not be used now). Returns
   * the call as it is now. Reads the call once (twice only when it finished meanwhile).
   */
  async cancel<L extends CallLease>(
    lease: L,
    callId: string,
    assertUsable: (lease: L) => void = () => undefined,
  ): Promise<{ call: CallView; changed: boolean }> {
    const { store, agent, now } = this.deps;
    const call = await this.get(lease.id, callId);
    if (call.status === 'finished') return { call, changed: false };
    assertUsable(lease);
    const requested = await store.appendEvent(lease.id, callId, { type: 'call.cancel_requested' }, now(), 'cancel_requested', {
      unlessFinished: true,
    });
    if (requested === null) return { call: await this.get(lease.id, callId), changed: true };
    // Taken back before an attempt began (or before its job was added): it never runs, and ends here.
    if ((await agent.takeBack(lease.id, callId)) !== 'taken') {
      const error = errorInfo('execution.cancelled', 'cancelled before it started; nothing ran');
      const result = resultWithoutRun(callId, 'cancelled', error);
      if (await this.finish(lease.id, callId, result, now())) return { call: { ...call, status: 'finished', result }, changed: true };
      return { call: await this.get(lease.id, callId), changed: true };
    }
    await agent.requestCancel(lease.id, callId);
    // Signalled, not ended: the call is as it was read until its agent reports.
    return { call, changed: true };
  }

  /** Ids of the lease's calls that have not finished. */
  openCalls(leaseId: string): Promise<string[]> {
    return this.deps.store.openCalls(leaseId);
  }

  /** Ids of the lease's calls waiting for approval (nothing of them queued). */
  async waitingForApproval(leaseId: string): Promise<string[]> {
    const open = await Promise.all((await this.openCalls(leaseId)).map((callId) => this.deps.store.getCall(leaseId, callId)));
    return open.filter((c) => c?.status === 'pending_approval').map((c) => c!.callId);
  }

  /** Resolves once none of the lease's calls is open, or at `untilMs` (epoch ms, by `now`), whichever comes first (waiting.ts). */
  waitAllFinished(leaseId: string, untilMs: number): Promise<void> {
    return waitAllFinished(this.deps, leaseId, untilMs);
  }

  /** Ledgers one message from a sandbox agent. Idempotent: redelivered messages are stored once. */
  async ingest(leaseId: string, message: ReturnMessage): Promise<void> {
    const at = this.deps.now();
    if (message.kind === 'event') {
      const started = message.body.type === 'call.started';
      // call.started also marks the call running, in the same round trip.
      await this.deps.store.appendEvent(leaseId, message.callId, message.body, at, `${message.attemptId}:${message.n}`, {
        unlessFinished: true,
        markRunning: started,
      });
      if (started) this.deps.log.info({ sandboxId: leaseId, callId: message.callId, attemptId: message.attemptId }, 'call started');
      return;
    }
    if (message.kind === 'artifact_chunk' || message.kind === 'artifact_end' || message.kind === 'artifact_ready') {
      await ingestArtifact(this.deps, leaseId, message, at);
      return;
    }
    if (message.kind === 'detached') {
      await this.deps.store.detachCall(leaseId, message.callId, message.result, message.attemptId, at);
      return;
    }
    const stored = await this.finish(leaseId, message.callId, await this.withInjections(leaseId, message.result), at, null, message.trace);
    if (!stored)
      this.deps.log.info(
        { sandboxId: leaseId, callId: message.callId, attemptId: message.attemptId },
        'ignored a second result for a finished call',
      );
  }

  /** `result` with the secrets the egress proxy injected into the call's requests in its receipt (when any were). */
  private async withInjections(leaseId: string, result: ToolResult): Promise<ToolResult> {
    const injected = result.receipt ? ((await this.deps.egress?.injectedInto(leaseId, result.callId)) ?? []) : [];
    return injected.length === 0 ? result : { ...result, receipt: { ...result.receipt!, credentialsInjected: injected } };
  }

  /**
   * Ends a call whose enqueue failed, as `failed` (`queue.unavailable`) — unless the add reached
   * Redis though its answer was lost (a connection cut mid-command): a job no agent has taken
   * yet is taken back first; one already taken runs and reports like any call (true: the
   * submission then succeeded after all).
   */
  private async abandonUnqueued(leaseId: string, callId: string, error: ReturnType<typeof errorInfo>): Promise<boolean> {
    if ((await this.deps.agent.takeBack(leaseId, callId)) === 'taken') return true;
    await this.finish(leaseId, callId, resultWithoutRun(callId, 'failed', error), this.deps.now());
    return false;
  }

  /**
   * Stores a call's terminal result (CallStore.finishCall) and, when this was the one that
   * finished it, counts it and logs it with the sandbox, call and attempt ids. Returns whether
   * it was stored (false: the call had finished before).
   */
  private async finish(
    leaseId: string,
    callId: string,
    result: ToolResult,
    at: Date,
    onlyIf: 'pending_approval' | null = null,
    agentSpans: AgentSpan[] = [],
  ): Promise<boolean> {
    // The store hands back the intent it finished (null: finished before), so no second read.
    const call = await this.deps.store.finishCall(leaseId, callId, result, at, onlyIf);
    if (!call) return false;
    if (this.deps.tracing) recordCallSpans(this.deps.tracing, call, result, at, agentSpans);
    const seconds = Math.max(0, at.getTime() - Date.parse(call.createdAt)) / 1000;
    this.deps.metrics.callFinished(call.tool, result.status, seconds);
    this.deps.log.info(
      {
        sandboxId: leaseId,
        callId,
        attemptId: result.receipt?.attemptId ?? null,
        tool: call.tool,
        status: result.status,
        durationMs: Math.round(seconds * 1000),
      },
      'call finished',
    );
    return true;
  }

  /**
   * Finishes every open call of a lease that is going away: `cancelled` (`not_started`) when
   * no attempt started, `effect_unknown` (`unknown`) when one did (docs/DESIGN.md invariant 2).
   * For a started attempt the control plane writes the receipt itself, from what it knows: the
   * agent that would have is gone. `attemptOf` returns the started attempt's id, or null.
   */
  async abandonOpenCalls(
    leaseId: string,
    manifestDigest: string | null,
    attemptOf: (callId: string) => Promise<string | null>,
  ): Promise<void> {
    for (const callId of await this.deps.store.openCalls(leaseId)) {
      const call = await this.get(leaseId, callId);
      const now = this.deps.now();
      const result = abandonedResult(call, await attemptOf(callId), manifestDigest, now);
      await this.finish(leaseId, callId, result, now);
    }
  }
}
