/**
 * Runs the calls of one sandbox: takes a `CallJob`, makes sure the call takes effect at most once
 * (a durable attempt marker in Redis: a redelivered call that already started is reported as
 * `effect_unknown`, never re-run — docs/DESIGN.md invariant 5), executes the tool, builds the receipt
 * and the result, and sends them back.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { errorInfo } from '../../contract/errors.js';
import type { ToolResult } from '../../contract/objects.js';
import { attemptReceipt, resultWithoutRun } from '../../contract/receipts.js';
import { CallJob, type AgentConfig, type LeaseKeys } from '../../contract/queue.js';
import { credentialTrustEnv } from '../../contract/secrets.js';
import { AGENT_RUNTIME_FETCH_PROXY } from '../../contract/agent-runtime.js';
import { outcomeWithoutRun, type AgentTool, type AttemptOutcome } from './attempt.js';
import type { ReturnChannel } from '../link/return-channel.js';
import { digestOf, type ArtifactShelf } from '../link/artifact-shelf.js';
import { resolveAccesses } from './accesses.js';
import type { AccessScheduler } from './scheduler.js';
import type { ProcessTrees } from '../host/process-trees.js';
import { spawnLauncher, type Launch } from '../host/tool-spawner.js';
import type { OpenInput } from '../link/input-stream.js';
import type { LeaseSecrets } from '../host/secrets.js';
import { SpoolBudget } from '../output/spool.js';
import type { BeginAttempt } from '../link/attempt-start.js';
import { AttemptTrace } from './attempt-trace.js';

export interface CallRunnerDeps {
  config: AgentConfig;
  scheduler: AccessScheduler;
  /** Starts an exec's launcher process (see AttemptContext.launch); default: Node's spawn from the agent. */
  launch?: Launch;
  /** Pids of the agent's own tool-user processes (see AttemptContext.agentPids). */
  agentPids: () => ReadonlySet<number>;
  /** Opens a call's input stream (`link/input-stream.ts`). */
  openInput: OpenInput;
  /** Publishes a message on a channel (PUBLISH; best effort: a failure is ignored). */
  publish: (channel: string, message: string) => void;
  /** The agent's one registry of process trees kept between calls (`host/process-trees.ts`). */
  processTrees: ProcessTrees;
  keys: LeaseKeys;
  secrets: LeaseSecrets;
  tools: ReadonlyMap<string, AgentTool<unknown>>;
  /** Absolute path of the shell `exec` runs `cmd` with (host/image-probe.ts `detectShell`). */
  shell: string;
  /** The return path: only what the runner uses of it (tests pass a fake). */
  returns: Pick<ReturnChannel, 'forAttempt' | 'offerArtifact'>;
  /** Where offered artifacts wait for the control plane to fetch them. */
  shelf: Pick<ArtifactShelf, 'hold' | 'forget'>;
  /** The redelivery check, the cancel check and the claim of the attempt marker, one round trip (`link/attempt-start.ts`). */
  beginAttempt: BeginAttempt;
  /** The agent's logger (bound to the sandbox); each attempt logs through a child bound to its call and attempt. */
  log: Logger;
}

/** What `run` prepared for an attempt: its id, logger, return channel, start time, tool, parsed args and cancel controller. */
interface AttemptParts {
  attemptId: string;
  log: Logger;
  channel: ReturnType<CallRunnerDeps['returns']['forAttempt']>;
  now: Date;
  tool: AgentTool<unknown>;
  args: unknown;
  controller: AbortController;
  /** The attempt's phases as spans, when the call is traced. */
  trace: AttemptTrace | null;
}

export class CallRunner {
  private readonly running = new Map<string, AbortController>();
  private readonly spoolBudget: SpoolBudget;
  /** The lease's env and secrets: from the config, or from the binding of a pooled sandbox. */
  private leaseEnv: Record<string, string>;
  private secrets: LeaseSecrets;
  private bound: boolean;

  constructor(private readonly deps: CallRunnerDeps) {
    this.spoolBudget = new SpoolBudget(deps.config.spool.maxTotalBytes);
    this.leaseEnv = deps.config.env;
    this.secrets = deps.secrets;
    this.bound = !deps.config.pooled;
  }

  /**
   * Binds a pooled sandbox to the lease that claimed it: its env and secrets apply to every
   * call from now on. Throws Error when the sandbox is not pooled or was bound already (a
   * sandbox serves one lease, once).
   */
  bind(env: Record<string, string>, secrets: LeaseSecrets): void {
    if (this.bound) throw new Error('this sandbox is bound to its lease already');
    this.bound = true;
    this.leaseEnv = env;
    this.secrets = secrets;
  }

  /** Number of calls executing now. */
  get activeCount(): number {
    return this.running.size;
  }

  /** Cancels a running call: its tool kills what it started. Calls not started yet see the durable cancel marker instead. */
  cancel(callId: string): void {
    this.running.get(callId)?.abort();
  }

  /**
   * Runs one call of the inbox (a `CallJob`) and resolves true once its result is sent; false,
   * at once, for a copy of a call this agent is running now (that run answers). Throws when the
   * job cannot be read or the attempt start failed (Redis refused it): nothing ran, and the
   * entry is read again. Its place in the scheduler is taken before the first await, so calls
   * queue in the order the inbox handed them over.
   */
  async run(data: unknown): Promise<boolean> {
    const job = CallJob.parse(data);
    const trace = AttemptTrace.of(job.traceparent);
    // No accesses (the process tools): nothing to resolve, so nothing to wait for before it may run.
    const slot =
      job.accesses.length === 0
        ? this.deps.scheduler.acquire([])
        : this.deps.scheduler.acquire(job.accesses, () => resolveAccesses(job.accesses));
    try {
      return await this.runScheduled(job, slot, trace);
    } finally {
      (await slot)();
    }
  }

  private async runScheduled(job: CallJob, slot: Promise<unknown>, trace: AttemptTrace | null): Promise<boolean> {
    const attemptId = `att_${randomUUID()}`;
    const log = this.deps.log.child({ callId: job.callId, attemptId });
    const channel = this.deps.returns.forAttempt(job.callId, attemptId);
    const now = new Date();

    const tool = this.deps.tools.get(job.tool);
    if (!tool) {
      const error = errorInfo('input.unknown_tool', `this agent has no tool ${job.tool}`);
      await channel.result(this.result(job, attemptId, outcomeWithoutRun('failed', 'not_started', error, now)), trace?.finish());
      return true;
    }

    let args: unknown;
    try {
      args = tool.parse(job.args);
    } catch (err) {
      const error = errorInfo('input.invalid', `arguments the agent cannot read: ${(err as Error).message}`);
      await channel.result(this.result(job, attemptId, outcomeWithoutRun('failed', 'not_started', error, now)), trace?.finish());
      return true;
    }
    // A copy of a call this agent is running now: the running attempt will answer.
    if (this.running.has(job.callId)) return false;
    const controller = new AbortController();
    this.running.set(job.callId, controller);
    try {
      await this.attempt(job, { attemptId, log, channel, now, tool, args, controller, trace }, slot);
      return true;
    } finally {
      // Also when the attempt start failed: a re-read of the call must find it not running.
      this.running.delete(job.callId);
    }
  }

  /** Claims the attempt once the call's turn came, runs the tool and sends the result. */
  private async attempt(job: CallJob, a: AttemptParts, slot: Promise<unknown>): Promise<void> {
    const { attemptId, log, channel, now, tool, args, controller, trace } = a;
    await slot;
    trace?.scheduled();
    // One round trip, in this order: an attempt that began before (a redelivery after a crash)
    // decides first (not re-run, and not "nothing ran"); then a durable cancel; then the claim.
    // The marker says "an attempt began": set right before the tool runs, so a call that waited
    // for its turn and was lost with the agent is not taken for one that ran.
    const secrets = Array.isArray(job.args.secrets) ? job.args.secrets.filter((n): n is string => typeof n === 'string') : [];
    const start = await this.deps.beginAttempt(job.callId, attemptId, secrets);
    // Taken back before it began; the control plane answered it (cancelled, nothing ran).
    if (start === 'removed') return;
    if (start === 'cancelled') {
      const error = errorInfo('execution.cancelled', 'cancelled before it started; nothing ran');
      await channel.result(this.result(job, attemptId, outcomeWithoutRun('cancelled', 'not_started', error, new Date())), trace?.finish());
      return;
    }
    if (start.startsWith('withdrawn:')) {
      const name = start.slice('withdrawn:'.length);
      const error = errorInfo('policy.secret_denied', `secret ${name} was withdrawn before the call started: nothing ran`, {
        tool: job.tool,
        field: 'args.secrets',
        name,
        withdrawn: true,
      });
      await channel.result(this.result(job, attemptId, outcomeWithoutRun('denied', 'not_started', error, new Date())), trace?.finish());
      return;
    }
    if (start !== 'claimed') {
      const error = errorInfo('execution.effect_unknown', 'an earlier attempt of this call started and its outcome was lost; not re-run');
      log.warn('redelivered call: an earlier attempt started, so it is not run again');
      await channel.result(this.result(job, attemptId, outcomeWithoutRun('effect_unknown', 'unknown', error, now)), trace?.finish());
      return;
    }
    let outcome: AttemptOutcome;
    let backgroundGroup: number | null = null;
    // Debug, not info: the agent's lines go through the engine's log driver, paid per line on
    // every call; `call finished` below carries the call's ids, and the control plane logs both.
    log.debug({ tool: job.tool }, 'call started');
    try {
      outcome = await tool.execute(
        {
          callId: job.callId,
          attemptId,
          timeoutMs: job.timeoutMs,
          maxOutputBytes: job.maxOutputBytes,
          cancelSignal: controller.signal,
          toolUser: this.deps.config.toolUser,
          leaseEnv: this.leaseEnv,
          imageEnv: this.deps.config.imageEnv,
          workdir: this.deps.config.workdir,
          shell: this.deps.shell,
          networkEnv: proxyEnv(this.deps.config.egress, job.egressCredential),
          secrets: this.secrets,
          launch: this.deps.launch ?? spawnLauncher,
          agentPids: this.deps.agentPids,
          processTrees: this.deps.processTrees,
          detach: (pgid) => {
            backgroundGroup = pgid;
            this.deps.processTrees.keep(pgid, { kind: 'call', id: job.callId });
            channel.detached(detachedResult(job.callId, pgid));
            // A background task holds no access: later calls need not wait for it to end.
            void slot.then((release) => (release as () => void)());
          },
          emit: channel.emit,
          openInput: this.deps.openInput,
          publishLive: (offset, data) =>
            this.deps.publish(this.deps.keys.live(job.callId), JSON.stringify({ offset, dataBase64: data.toString('base64') })),
          spool: { ...this.deps.config.spool, budget: this.spoolBudget },
          offerArtifact: async (file, name, mediaType) => {
            const id = `art_${randomUUID().replaceAll('-', '')}`;
            try {
              const { size, sha256 } = file.digest ?? (await digestOf(file.path));
              this.deps.shelf.hold(id, file);
              await this.deps.returns.offerArtifact(job.callId, id, name, mediaType, size, sha256);
              return { id, size, sha256 };
            } catch (err) {
              this.deps.shelf.forget(id);
              await file.release();
              throw err;
            }
          },
        },
        args,
      );
    } catch (err) {
      // A call always ends with a result: a tool that throws has an outcome nobody observed.
      const error = errorInfo('execution.effect_unknown', `the tool failed unexpectedly: ${(err as Error).message}`);
      log.error({ err }, 'the tool threw');
      outcome = outcomeWithoutRun('effect_unknown', 'unknown', error, now);
    } finally {
      if (backgroundGroup !== null) this.deps.processTrees.release(backgroundGroup);
    }
    trace?.worked(outcome.startedAt, outcome.endedAt);
    log.info(
      {
        tool: job.tool,
        status: outcome.status,
        exitCode: outcome.exit?.code ?? null,
        durationMs: outcome.endedAt.getTime() - outcome.startedAt.getTime(),
      },
      'call finished',
    );
    const receiptStartMs = Date.now();
    const result = this.result(job, attemptId, outcome);
    await channel.result(result, trace?.finish(receiptStartMs));
  }

  private result(job: CallJob, attemptId: string, o: AttemptOutcome): ToolResult {
    const subject = {
      callId: job.callId,
      attemptId,
      leaseId: this.deps.config.leaseId,
      tool: job.tool,
      toolVersion: job.toolVersion,
      fingerprint: job.fingerprint,
      manifestDigest: job.manifestDigest,
    };
    const receipt = attemptReceipt(subject, o.commitState, o.startedAt, o.endedAt, o);
    return {
      callId: job.callId,
      status: o.status,
      error: o.error,
      modelText: o.modelText,
      exitCode: o.exit?.code ?? null,
      signal: o.exit?.signal ?? null,
      stdout: o.stdout,
      stderr: o.stderr,
      truncation: o.truncation,
      data: o.data,
      artifacts: o.artifacts ?? [],
      receipt,
    };
  }
}

/** The answer a background task gives at once: its handle (the callId) and its process group. */
function detachedResult(callId: string, pgid: number): ToolResult {
  const modelText = `running in the background as task ${callId} (pid ${pgid}); its output streams on the call's events`;
  return resultWithoutRun(callId, 'detached', null, { modelText, data: { taskId: callId, pid: pgid } });
}

/**
 * The proxy variables tools honour (curl, git, pip, npm via HTTP(S)_PROXY; lower-case too, since
 * some read only those) for the agent's egress listener; loopback stays direct. The call's proxy
 * credential (`<callId>:<token>`, URL-safe) goes into the URL's userinfo: clients send it as
 * `Proxy-Authorization`, which tells the proxy the call (control-plane/egress/attribution.ts).
 * With credential injection, also the variables of the lease CA's files.
 */
function proxyEnv(egress: AgentConfig['egress'], credential: string | undefined): Record<string, string> {
  if (!egress) return {};
  const url = `http://${credential === undefined ? '' : `${credential}@`}127.0.0.1:${egress.port}`;
  const noProxy = 'localhost,127.0.0.1,::1';
  const trust = egress.trust === true ? credentialTrustEnv() : {};
  // Node's fetch honours none of the above by itself (sandbox-agent/egress/fetch-proxy.ts).
  const nodeOptions = `--require ${AGENT_RUNTIME_FETCH_PROXY}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    NODE_OPTIONS: nodeOptions,
    // git's default (anyauth) sends proxy credentials only after a 407, which this proxy never asks for.
    ...(credential === undefined ? {} : { GIT_HTTP_PROXY_AUTHMETHOD: 'basic' }),
    ...trust,
  };
}
