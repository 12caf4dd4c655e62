/**
 * What a tool implementation gets for one attempt and what it hands back. The call runner turns
 * an `AttemptOutcome` into the receipt and the result; tools never build those themselves.
 */
import { errorInfo, type ErrorInfo } from '../../contract/errors.js';
import type { EventBody } from '../../contract/events.js';
import type { CommitState, EffectReceipt, ResultStatus, ToolResult } from '../../contract/objects.js';
import type { AgentConfig } from '../../contract/queue.js';
import type { ProcessTrees } from '../host/process-trees.js';
import type { Launch } from '../host/tool-spawner.js';
import type { LeaseSecrets } from '../host/secrets.js';
import type { HeldFile } from '../link/artifact-shelf.js';
import type { OpenInput } from '../link/input-stream.js';
import type { SpoolBudget } from '../output/spool.js';

export interface AttemptContext {
  readonly callId: string;
  readonly attemptId: string;
  /** Wall-clock limit, ms. */
  readonly timeoutMs: number;
  /** Per-stream bytes kept in events and the result. */
  readonly maxOutputBytes: number;
  /** Aborted when a cancel for this call arrives. */
  readonly cancelSignal: AbortSignal;
  readonly toolUser: AgentConfig['toolUser'];
  readonly leaseEnv: Record<string, string>;
  /** The image's Env: under the network and lease env, over the agent's defaults. */
  readonly imageEnv: Record<string, string>;
  /** The default cwd of `exec` (`AgentConfig.workdir`). */
  readonly workdir: string;
  /** Absolute path of the shell `exec` runs with (`SandboxFacts.shell`). */
  readonly shell: string;
  /** The egress proxy variables (network mode `allowlist`), under the lease env; else empty. */
  readonly networkEnv: Record<string, string>;
  /** The lease's secrets: their redaction (for every call's output) and delivery to calls that ask. */
  readonly secrets: LeaseSecrets;
  /** Starts an exec's launcher process (host/tool-spawner.ts): from the spawn server, else from the agent. */
  readonly launch: Launch;
  /** Processes of the tool user that are the agent's own (its worker): a sweep spares them. */
  readonly agentPids: () => ReadonlySet<number>;
  /** The process trees kept between calls (background tasks, sessions, terminals): a sweep spares them. */
  readonly processTrees: ProcessTrees;
  /**
   * Turns the call into a background task whose process group (and session) is `pgid`: answers
   * `detached` with the handle now, keeps its tree from sweeps and lets other calls run; the
   * outcome the tool returns later is the call's final result.
   */
  detach(pgid: number): void;
  /**
   * Opens this call's input stream (terminal input and resizes, an exec's piped stdin): the
   * handler gets each message in order until `close()`.
   */
  readonly openInput: OpenInput;
  /** Publishes output bytes at `offset` on the call's live channel (best effort, ahead of the `output` events). */
  publishLive(offset: number, data: Buffer): void;
  /** Queues an event for the control plane; events keep the order of `emit` calls. */
  emit(body: EventBody): void;
  /** Where output is spooled, the cap per stream (bytes) and the budget all spools share. */
  readonly spool: { dir: string; maxArtifactBytes: number; budget: SpoolBudget };
  /**
   * Hands `file` to the control plane as an artifact: announced with its size and sha256 (from
   * `digest` when the caller has them, else read from the file), then held until the control
   * plane fetched it over a transfer tunnel, when `file.release` runs (link/artifact-shelf.ts).
   * Resolves once announced; on a rejection `release` has run.
   */
  offerArtifact(file: OfferedFile, name: string, mediaType: string): Promise<{ id: string; sha256: string; size: number }>;
}

/** A file offered as an artifact: where it is, how to let it go, and its digest when known. */
export interface OfferedFile extends HeldFile {
  digest?: { size: number; sha256: string };
}

export interface AttemptOutcome {
  status: ResultStatus;
  error: ErrorInfo | null;
  commitState: CommitState;
  startedAt: Date;
  endedAt: Date;
  exit: EffectReceipt['exit'];
  environment: EffectReceipt['environment'];
  runner: EffectReceipt['runner'];
  outputs: EffectReceipt['outputs'];
  cleanup: EffectReceipt['cleanup'];
  versions: EffectReceipt['versions'];
  data: ToolResult['data'];
  stdout: string;
  stderr: string;
  truncation: ToolResult['truncation'];
  /** Names of the secrets the attempt's process received (the receipt's `secretsUsed`). */
  secretsUsed?: string[];
  /** Artifacts the attempt produced (also listed in the receipt). */
  artifacts?: ToolResult['artifacts'];
  modelText: string;
}

/** A tool as the agent runs it: a name, a version and an execute function over parsed args. */
export interface AgentTool<Args> {
  readonly name: string;
  readonly version: string;
  parse(args: unknown): Args;
  execute(ctx: AttemptContext, args: Args): Promise<AttemptOutcome>;
}

/** The outcome of an attempt that ran nothing (or whose run nobody observed): no exit, no output. */
export function outcomeWithoutRun(
  status: AttemptOutcome['status'],
  commitState: AttemptOutcome['commitState'],
  error: ErrorInfo,
  at: Date,
): AttemptOutcome {
  return {
    status,
    error,
    commitState,
    startedAt: at,
    endedAt: at,
    exit: null,
    environment: null,
    runner: null,
    outputs: null,
    cleanup: null,
    versions: [],
    data: null,
    stdout: '',
    stderr: '',
    truncation: null,
    modelText: error.message,
  };
}

/** The part of an outcome that says how the attempt went. */
export type Verdict = Pick<AttemptOutcome, 'status' | 'commitState' | 'error'>;

/**
 * The verdict on a program stopped by its timeout (`timed_out`, `execution.timeout`) or by a
 * cancel (`cancelled`, `execution.cancelled`): what it did before is `unknown`. `message` says
 * what was stopped and how.
 */
export function stoppedVerdict(killedBy: 'timeout' | 'cancel', message: string, details?: Record<string, unknown>): Verdict {
  return killedBy === 'timeout'
    ? { status: 'timed_out', commitState: 'unknown', error: errorInfo('execution.timeout', message, details) }
    : { status: 'cancelled', commitState: 'unknown', error: errorInfo('execution.cancelled', message, details) };
}

/**
 * The verdict on a program that ended by itself: exit 0 `succeeded`; another code `failed` with
 * `execution.nonzero_exit` (committed: it ran to its end); a signal `failed` with
 * `execution.signaled` (unknown: the signal may have cut an effect short). `note` ends the
 * nonzero message (e.g. `; the session has ended`); `killed` names what the signal killed.
 */
export function exitVerdict(
  exit: { code: number | null; signal: string | null },
  wording: { note?: string; killed?: string } = {},
): Verdict {
  const note = wording.note ?? '';
  if (exit.code === 0) return { status: 'succeeded', commitState: 'committed', error: null };
  if (exit.code !== null) {
    const error = errorInfo('execution.nonzero_exit', `exited with code ${exit.code}${note}`, { exitCode: exit.code });
    return { status: 'failed', commitState: 'committed', error };
  }
  const what = wording.killed ? `${wording.killed} was killed` : 'killed';
  return {
    status: 'failed',
    commitState: 'unknown',
    error: errorInfo('execution.signaled', `${what} by ${exit.signal}`, { signal: exit.signal }),
  };
}
