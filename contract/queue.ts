/**
 * Queue topology (docs/DESIGN.md §5) and the messages that cross it.
 *
 * Every key a sandbox's agent may touch lives under its lease namespace
 * `<rootPrefix>lease:<leaseId>`; the per-lease Redis ACL user is limited to that pattern, so an
 * agent cannot read or write another sandbox's queues. Inside the namespace:
 * - stream `inbox` (control plane → agent): one entry per call and one for a pooled sandbox's
 *   binding (`INBOX_FIELDS`), read by the agent through the consumer group `INBOX_GROUP`, so an
 *   entry it was handed and did not acknowledge (a call cut short by a reconnect or a crash) is
 *   handed to it again; the agent acknowledges and deletes an entry once the call's result is on
 *   `returns`. A call is added once: `queued:<callId>` (`waiting`, set with the entry) is the
 *   duplicate check, and the control plane takes back a call no attempt began by setting it to
 *   `removed`, which the agent's attempt start reads (the entry itself then goes unanswered);
 *   taking back a call never added sets it too, so its add is a no-op if it comes later.
 * - stream `returns` (agent → control plane): events, results and artifact chunks, one entry each
 *   (`encodeReturn`), in the order the agent produced them; the control plane deletes an entry
 *   once it is ledgered. Every message carries its deterministic identity (an event's
 *   `attemptId` + `n`, a result's `callId`, a chunk's `artifactId` + `index`), so one delivered
 *   twice (a resend after a reconnect, a consumer that died before its delete) is stored once.
 * - `attempt:<callId>`: the agent's durable "an attempt started" marker (dedupe on redelivery).
 * - `queued:<callId>`: `waiting` from the add of the call's inbox entry, `removed` once taken back.
 * - `cancel:<callId>`: the control plane's durable "cancel requested" marker, checked by the
 *   agent before it starts a call (the `control` message only reaches a running one).
 * - `hello`: list the agent pushes its `AgentHello` onto once it is ready.
 * - `secrets`: the lease's secret values sealed for its agent (`SecretDelivery`); the agent
 *   takes it once at start (GETDEL), and it expires by itself if the agent never does.
 * - pub/sub channel `control`: cancel requests to the agent, and port preview connections to open.
 * - `bound`: list a pooled sandbox's agent pushes its `BindAck` onto once it took its lease's
 *   binding (the `bind` entry of the `inbox`).
 * - `changes`: the lease's file change log (`contract/watch.ts`), a Redis stream the agent
 *   appends to (XADD, entry id `<seq>-0`, MAXLEN-bounded) and the control plane reads.
 * - pub/sub channel `live:<callId>`: a terminal's output as written (`LiveOutput`), ahead of its events.
 * - `input:<callId>`: a Redis stream (control plane XADD, agent XREAD BLOCK) of `InputMessage`s
 *   for one running call, in order: a terminal's keystrokes and resizes, an exec's piped stdin.
 */
import { z } from 'zod';
import { EventBody } from './events.js';
import { PreviewOpen } from './previews.js';
import { TransferOpen } from './transfers.js';
import { ArtifactId, ImageFacts, SandboxFacts, ToolResult } from './objects.js';
import { SecretFilePath, SecretName } from './secrets.js';
import { Access, EnvMap, EnvName } from './tools.js';
import { AgentSpan, MAX_AGENT_SPANS, Traceparent } from './trace.js';

/** Bytes of every artifact chunk but the last: chunk `i` starts at byte `i * ARTIFACT_CHUNK_BYTES`. */
export const ARTIFACT_CHUNK_BYTES = 1024 * 1024;
export { ArtifactId } from './objects.js';

/** Names of the keys of one lease's namespace. */
export interface LeaseKeys {
  readonly namespace: string;
  readonly hello: string;
  readonly control: string;
  /** The lease's secret values sealed for its agent (`SecretDelivery`), until the agent takes them. */
  readonly secrets: string;
  /** Where a pooled sandbox's agent acknowledges its binding. */
  readonly bound: string;
  /** The file change log: a Redis stream of `ChangeEntry` (contract/watch.ts), entry ids `<seq>-0`. */
  readonly changes: string;
  /** The return stream (agent → control plane): one `encodeReturn` entry per `ReturnMessage`. */
  readonly returns: string;
  /** The inbox stream (control plane → agent): calls and a pooled sandbox's binding, `INBOX_FIELDS`. */
  readonly inbox: string;
  /** Whether the call's inbox entry still waits (`waiting`) or was taken back (`removed`, also before any add); absent: neither added nor taken back. */
  queued(callId: string): string;
  /** The lease's granted secrets its current policy or phase no longer allows (a set): an attempt naming one does not start. */
  readonly withdrawn: string;
  attempt(callId: string): string;
  cancel(callId: string): string;
  /** The stream of `InputMessage`s to a running call (terminal input and resizes, piped stdin). */
  input(callId: string): string;
  /**
   * Bytes of piped stdin queued on `input(callId)` and not yet handed to the process (a counter:
   * the control plane adds before it appends, the agent subtracts once the pipe took them).
   */
  inputPending(callId: string): string;
  /** Pub/sub channel of a terminal's output as it is written (`LiveOutput`), ahead of the ledger. */
  live(callId: string): string;
  /** Redis ACL key and channel pattern covering the namespace. */
  readonly aclPattern: string;
}

/** Key layout of a lease under `rootPrefix` (e.g. `sbx:`). */
export function leaseKeys(rootPrefix: string, leaseId: string): LeaseKeys {
  const namespace = `${rootPrefix}lease:${leaseId}`;
  return {
    namespace,
    hello: `${namespace}:hello`,
    control: `${namespace}:control`,
    secrets: `${namespace}:secrets`,
    bound: `${namespace}:bound`,
    changes: `${namespace}:changes`,
    returns: `${namespace}:returns`,
    inbox: `${namespace}:inbox`,
    queued: (callId) => `${namespace}:queued:${callId}`,
    withdrawn: `${namespace}:withdrawn`,
    attempt: (callId) => `${namespace}:attempt:${callId}`,
    cancel: (callId) => `${namespace}:cancel:${callId}`,
    input: (callId) => `${namespace}:input:${callId}`,
    inputPending: (callId) => `${namespace}:input-pending:${callId}`,
    live: (callId) => `${namespace}:live:${callId}`,
    aclPattern: `${namespace}:*`,
  };
}

/** How a lease receives one secret: as an env var and/or a file, in the calls that ask for it. */
export const SecretGrant = z
  .object({
    name: SecretName,
    /** Env var set in the process of a call that asks for the secret; null: not delivered as env. */
    env: EnvName.nullable(),
    /** File (mode 0440, the tool user's group) present while a call that asks for it runs; null: no file. */
    file: SecretFilePath.nullable(),
  })
  .strict();
export type SecretGrant = z.infer<typeof SecretGrant>;

/** The agent's credentials file (mode 0400, root): how it reaches its own lease's keys. */
/**
 * Who the tools run as, and (optional: configs before it) whose choice that was: the policy's
 * `runtime.toolUser`, the image's `User`, or the default `sandbox` (1000:1000).
 */
export const ToolUser = z.object({
  name: z.string(),
  uid: z.number().int(),
  gid: z.number().int(),
  home: z.string(),
  source: z.enum(['policy', 'image', 'default']).optional(),
});
export type ToolUser = z.infer<typeof ToolUser>;

export const AgentConfig = z.object({
  leaseId: z.string(),
  rootPrefix: z.string(),
  redis: z.object({ path: z.string(), username: z.string(), password: z.string() }),
  toolUser: ToolUser,
  /** The tools' default cwd: the image's `WorkingDir`, else `/workspace`. */
  workdir: z.string(),
  /**
   * The image's `Env` (PATH, PYTHONPATH, a conda prefix, ...): the tools' environment over the
   * agent's defaults and under the lease's env. The agent itself never runs with it.
   */
  imageEnv: EnvMap.default({}),
  /** Lease env, applied under every call's env. */
  env: EnvMap,
  /** Agent-only directory for output spooled to become artifacts; `maxArtifactBytes` per stream, `maxTotalBytes` for all at once. */
  spool: z.object({ dir: z.string(), maxArtifactBytes: z.number().int().positive(), maxTotalBytes: z.number().int().positive() }),
  /** What the file tools may reach: canonical roots, and the largest file they read or write (bytes). */
  files: z.object({ roots: z.array(z.string()), maxFileBytes: z.number().int().positive() }),
  /**
   * Network mode `allowlist`: the agent listens on 127.0.0.1:`port` and forwards to the control
   * plane's egress proxy at `socketPath`; tool processes get the standard proxy variables.
   * Null for mode `none`.
   */
  egress: z
    .object({
      port: z.number().int().min(1).max(65535),
      socketPath: z.string(),
      /** Credential injection: tool processes also get the lease CA's variables (secrets.ts `credentialTrustEnv`). */
      trust: z.boolean().optional(),
    })
    .nullable()
    .default(null),
  /**
   * Set where the sandbox reaches the control plane through a node relay (contract/link.ts): the
   * relay's `link.sock` and this lease's link token. The egress proxy and byte tunnels are then
   * dialled there (with a LinkHeader) instead of the Unix sockets of the control plane's host.
   */
  link: z.object({ path: z.string(), token: z.string() }).nullable().default(null),
  /**
   * Started ahead of demand for a warm pool: `env` and `secrets` are empty until the lease that
   * claims the sandbox sends its `LeaseBinding` (a `bind` entry of the inbox).
   */
  pooled: z.boolean().default(false),
  /**
   * The secrets the lease was granted (names and how to deliver them; no values) and the
   * base64 AES-256 key the values are sealed under in `LeaseKeys.secrets` (null: none granted).
   */
  secrets: z.object({ grants: z.array(SecretGrant), deliveryKey: z.string().nullable() }),
  /**
   * What an earlier agent measured of the same image, tool user and agent runtime (ImageFacts),
   * when the control plane has it: the agent reports it instead of probing the image again. Null:
   * the agent measures.
   */
  imageFacts: ImageFacts.nullable().default(null),
});
export type AgentConfig = z.infer<typeof AgentConfig>;

/** A call as the agent receives it: already validated, resolved and authorized. */
export const CallJob = z.object({
  callId: z.string(),
  tool: z.string(),
  toolVersion: z.string(),
  args: z.record(z.string(), z.unknown()),
  fingerprint: z.string(),
  manifestDigest: z.string(),
  /** Effective limit after policy, ms. */
  timeoutMs: z.number().int().positive(),
  /** Per-stream cap on bytes kept in events and the result. */
  maxOutputBytes: z.number().int().positive(),
  /** What the call touches, as the control plane normalized it; the agent resolves paths canonically before it schedules the call. */
  accesses: z.array(Access),
  /**
   * `<callId>:<token>`: the egress proxy credential of this call, which the agent puts into its
   * processes' proxy variables so the proxy can tell the call's requests apart
   * (control-plane/egress/attribution.ts).
   */
  egressCredential: z.string().optional(),
  /** The W3C trace context of the call's `execute_tool` span when tracing is on (contract/trace.ts): the agent's phases become its spans. */
  traceparent: Traceparent.optional(),
});
export type CallJob = z.infer<typeof CallJob>;

/** Agent → control plane. `n` numbers an attempt's events from 1 (the ledger's dedupe key). */
export const ReturnMessage = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('event'), callId: z.string(), attemptId: z.string(), n: z.number().int().positive(), body: EventBody }),
  /**
   * `trace`: the attempt's phases as spans of the call's trace, when the job had a `traceparent`.
   * Telemetry never fails the work it describes: a `trace` the contract rejects is read as absent.
   */
  z.object({
    kind: z.literal('result'),
    callId: z.string(),
    attemptId: z.string(),
    result: ToolResult,
    trace: z.array(AgentSpan).max(MAX_AGENT_SPANS).optional().catch(undefined),
  }),
  /** A background task's handle (status `detached`); its final `result` follows when it ends. */
  z.object({ kind: z.literal('detached'), callId: z.string(), attemptId: z.string(), result: ToolResult }),
  /** One chunk of an artifact, in order from index 0, with the sha256 (hex) of its bytes. */
  z.object({
    kind: z.literal('artifact_chunk'),
    callId: z.string(),
    artifactId: ArtifactId,
    index: z.number().int().nonnegative(),
    sha256: z.string(),
    /** The chunk's bytes: raw in the stream entry (its `d` field), never base64 in the JSON. */
    data: z.custom<Buffer>((v) => Buffer.isBuffer(v), 'expected the chunk bytes'),
  }),
  /**
   * An artifact the agent holds, whole, for the control plane to fetch over a transfer tunnel
   * (contract/transfers.ts, op `artifact`): its bytes never enter the stream. Size (bytes) and
   * sha256 (hex) to verify. Agents before it send `artifact_chunk`s and `artifact_end` instead,
   * which the control plane still takes.
   */
  z.object({
    kind: z.literal('artifact_ready'),
    callId: z.string(),
    artifactId: ArtifactId,
    name: z.string(),
    mediaType: z.string(),
    size: z.number().int().nonnegative(),
    sha256: z.string().regex(/^[a-f0-9]{64}$/),
  }),
  /** The artifact is complete: its size (bytes), chunk count and whole sha256 (hex) to verify. */
  z.object({
    kind: z.literal('artifact_end'),
    callId: z.string(),
    artifactId: ArtifactId,
    name: z.string(),
    mediaType: z.string(),
    size: z.number().int().nonnegative(),
    chunks: z.number().int().nonnegative(),
    sha256: z.string(),
  }),
]);
export type ReturnMessage = z.infer<typeof ReturnMessage>;

/**
 * The fields of a return stream entry: `m` the message as JSON; `d` an artifact chunk's raw
 * bytes; `o` and `e` a result's `stdout` and `stderr` as UTF-8 bytes. Kept output may be up to
 * `maxOutputBytes` per stream, and inside the JSON every control character of it would take six
 * bytes (`\u0000`): binary output would travel, and be held in the agent's memory, six times.
 */
export const RETURN_FIELD = 'm';
export const RETURN_DATA_FIELD = 'd';
export const RETURN_STDOUT_FIELD = 'o';
export const RETURN_STDERR_FIELD = 'e';

/** A `ReturnMessage` as the field/value list of its stream entry (XADD): the JSON, and bytes beside it. */
export function encodeReturn(message: ReturnMessage): (string | Buffer)[] {
  if (message.kind === 'artifact_chunk') {
    const { data, ...rest } = message;
    return [RETURN_FIELD, JSON.stringify(rest), RETURN_DATA_FIELD, data];
  }
  if (message.kind === 'result' || message.kind === 'detached') {
    const { stdout, stderr, ...result } = message.result;
    return [RETURN_FIELD, JSON.stringify({ ...message, result }), RETURN_STDOUT_FIELD, stdout, RETURN_STDERR_FIELD, stderr];
  }
  return [RETURN_FIELD, JSON.stringify(message)];
}

/**
 * A return stream entry's field/value list (as XREAD returns it, in Buffers) back into the
 * message it encodes, unvalidated: the caller parses it with `ReturnMessage` (an agent is not
 * trusted to send well-formed entries). A result's output fields go back into its `result`
 * (agents before them sent the output inside the JSON, which decodes as it is). Returns null
 * when there is no JSON `m` field.
 */
export function decodeReturn(fields: readonly Buffer[]): unknown {
  let json: unknown = null;
  let data: Buffer | undefined;
  const output: { stdout?: string; stderr?: string } = {};
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i]!.toString();
    const value = fields[i + 1]!;
    if (name === RETURN_FIELD) {
      try {
        json = JSON.parse(value.toString());
      } catch {
        return null;
      }
    } else if (name === RETURN_DATA_FIELD) data = value;
    else if (name === RETURN_STDOUT_FIELD) output.stdout = value.toString('utf8');
    else if (name === RETURN_STDERR_FIELD) output.stderr = value.toString('utf8');
  }
  if (!isRecord(json)) return null;
  if (data !== undefined) return { ...json, data };
  // Output fields beside anything but a result object are left out: the parse then finds what is missing.
  if ((output.stdout !== undefined || output.stderr !== undefined) && isRecord(json.result)) {
    return { ...json, result: { ...json.result, ...output } };
  }
  return json;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** What the agent pushes to `hello` once connected: the facts the manifest is built from. */
export const AgentHello = z.object({ leaseId: z.string(), facts: SandboxFacts, startedAt: z.string() });
export type AgentHello = z.infer<typeof AgentHello>;

/**
 * Control plane → agent, one entry (field `m`, JSON) of `LeaseKeys.input(callId)`, applied in
 * stream order: bytes to the call's stdin or terminal, a terminal's new window size, or the end
 * of its stdin (`eof`: a pipe is closed; a terminal gets its EOF character).
 */
export const InputMessage = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('data'), dataBase64: z.string() }),
  z.object({ kind: z.literal('resize'), cols: z.number().int().positive(), rows: z.number().int().positive() }),
  z.object({ kind: z.literal('eof') }),
]);
export type InputMessage = z.infer<typeof InputMessage>;
/**
 * Agent → control plane on `LeaseKeys.live(callId)`: a terminal's output bytes the moment they
 * are written, at their byte `offset` in the stream — the same offsets as the `output` events the
 * ledger gets later, so an attached client is sent every byte once whichever path brings it first.
 * Best effort (pub/sub): the ledger's events remain the record.
 */
export const LiveOutput = z.object({ offset: z.number().int().nonnegative(), dataBase64: z.string() });
export type LiveOutput = z.infer<typeof LiveOutput>;

/** The field of an input stream entry that holds the `InputMessage` JSON. */
export const INPUT_FIELD = 'm';

/** Control plane → agent over the `control` channel: cancel a call; open a port preview connection (contract/previews.ts); run a file transfer (contract/transfers.ts). */
export const ControlMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('cancel'), callId: z.string() }),
  PreviewOpen,
  TransferOpen,
]);
export type ControlMessage = z.infer<typeof ControlMessage>;

/** The consumer group (and its one consumer) the agent reads its inbox through. */
export const INBOX_GROUP = 'agent';

/**
 * The fields of an inbox entry: `k` what it is, `call` (`m` a `CallJob`) or `bind` (`m` a
 * `LeaseBinding`: a pooled sandbox's first entry, as nothing is submitted before the lease
 * exists); `m` its JSON.
 */
export const INBOX_FIELDS = { kind: 'k', message: 'm' } as const;
export type InboxKind = 'call' | 'bind';

/** What a pooled sandbox learns when a lease claims it: the lease's env and secrets. */
export const LeaseBinding = z.object({
  env: EnvMap,
  secrets: z.object({ grants: z.array(SecretGrant), deliveryKey: z.string().nullable() }),
});
export type LeaseBinding = z.infer<typeof LeaseBinding>;

/** The agent's answer to a binding: taken, or why not (the sandbox is then discarded). */
export const BindAck = z.union([z.object({ ok: z.literal(true) }), z.object({ ok: z.literal(false), error: z.string() })]);
export type BindAck = z.infer<typeof BindAck>;
