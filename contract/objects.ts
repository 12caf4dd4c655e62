/**
 * The objects of docs/DESIGN.md §2 as zod schemas: the wire contract between the API, the control
 * plane and the sandbox agent. Types are `z.infer`red from these; nothing else defines them.
 */
import { z } from 'zod';
import { ErrorInfo } from './errors.js';

import { CredentialsInjected } from './egress.js';
import { Digest, Timestamp } from './scalars.js';

export { Digest, Timestamp } from './scalars.js';
export { EgressEvent } from './egress.js';

/** The exact policy version a lease is bound to. */
export const PolicyRef = z.object({ name: z.string(), version: z.number().int().positive(), digest: Digest });
export type PolicyRef = z.infer<typeof PolicyRef>;

/** Facts the agent measures inside a fresh sandbox before the lease is ready. */
export const SandboxFacts = z.object({
  os: z.object({ id: z.string(), name: z.string(), version: z.string().nullable() }),
  arch: z.string(),
  kernel: z.string(),
  /**
   * Versions as each binary on the tool user's PATH prints them (`node --version`, `npm --version`,
   * `git --version`, `python3 --version`, `pip3 --version`); `null` when the tool is absent from
   * the image. `npm` and `pip` are missing from facts measured by agents before they were reported
   * (optional rather than defaulted, so stored manifests keep their digests).
   */
  toolchain: z.object({
    node: z.string().nullable(),
    npm: z.string().nullable().optional(),
    git: z.string().nullable(),
    python: z.string().nullable(),
    pip: z.string().nullable().optional(),
  }),
  /** The tool user; `source` says whose choice it was (the policy's, the image's `User`, or the default). */
  user: z.object({
    name: z.string(),
    uid: z.number().int(),
    gid: z.number().int(),
    home: z.string(),
    source: z.enum(['policy', 'image', 'default']).optional(),
  }),
  workdir: z.string(),
  agentVersion: z.string(),
  /**
   * The image's C library, as its dynamic loader says: `glibc` or `musl` with the version, or
   * `none` (a static-only image: no loader). Optional: agents before it did not probe.
   */
  libc: z.object({ family: z.enum(['glibc', 'musl', 'none']), version: z.string().nullable() }).optional(),
  /**
   * The shell `exec` runs a `cmd` string with: the image's `/bin/bash`, else its `/bin/sh`, else
   * the agent runtime's busybox sh (`source: 'sbx-runtime'`).
   */
  shell: z.object({ path: z.string(), source: z.enum(['image', 'sbx-runtime']) }).optional(),
  /**
   * Further programs of the image as the tools' PATH finds them, with the version each prints
   * (`null`: absent): `rg` (without it `search` uses the agent's built-in walker), `bash`, `go`,
   * `java`, `rustc`, `gcc`, `make`, `conda`.
   */
  programs: z.record(z.string(), z.string().nullable()).optional(),
});
export type SandboxFacts = z.infer<typeof SandboxFacts>;

/**
 * The part of SandboxFacts that only the image, the tool user and the agent runtime decide (OS,
 * toolchain, C library, programs): what costs an agent a dozen probe processes at start. The
 * control plane keeps what the first agent of an image measured and hands it to later agents of
 * the same image (AgentConfig `imageFacts`), which then start without probing (issue 14).
 */
export const ImageFacts = SandboxFacts.pick({ os: true, toolchain: true, libc: true, programs: true });
export type ImageFacts = z.infer<typeof ImageFacts>;

/**
 * The image of a sandbox: the reference asked for, the engine's id, and (optional: manifests made
 * before) the image's own config — `Env` names only (values stay out), `WorkingDir` (the tools'
 * default cwd), `User`, `Labels`, and `Entrypoint`/`Cmd`, which are recorded and never run (the
 * agent runtime is the sandbox's init) — and its registry digests.
 */
export const ImageRecord = z.object({
  ref: z.string(),
  id: z.string(),
  repoDigests: z.array(z.string()).optional(),
  /** The registry digest (`repo@sha256:…`) of the reference a lease pulled (optional: images not pulled, manifests made before). */
  digest: z.string().optional(),
  config: z
    .object({
      envKeys: z.array(z.string()),
      workingDir: z.string().nullable(),
      user: z.string().nullable(),
      labels: z.record(z.string(), z.string()),
      entrypoint: z.array(z.string()).nullable(),
      cmd: z.array(z.string()).nullable(),
    })
    .optional(),
});
export type ImageRecord = z.infer<typeof ImageRecord>;

/**
 * What a sandbox *is*, content-addressed: `digest` is the sha256 of the canonical JSON of every
 * other field. Holds hashes and names, never env or secret values.
 */
/**
 * One writable root of a sandbox as its manifest records it: path, size limit in bytes, kind,
 * `source` (`policy`: the policy's `filesystem.writableRoots`; `lease`: asked for at create,
 * within the policy's `leaseWritableRoots`) and `fromImage` (it started with the image's content
 * at that path, owned by the tool user; false: it started empty).
 */
export const WritableRootEntry = z.object({
  path: z.string(),
  sizeBytes: z.number().int(),
  kind: z.enum(['volume', 'tmpfs']),
  source: z.enum(['policy', 'lease']),
  fromImage: z.boolean(),
});
export type WritableRootEntry = z.infer<typeof WritableRootEntry>;

export const EnvironmentManifest = SandboxFacts.extend({
  schemaVersion: z.literal(1),
  image: ImageRecord,
  runtime: z.object({ kind: z.literal('docker'), engineVersion: z.string(), ociRuntime: z.string() }),
  policy: PolicyRef,
  /**
   * The network the policy gives: its mode, and for `allowlist` the digest of its rules.
   * Manifests stored before this field existed had no other mode than `none`.
   */
  network: z
    .object({ mode: z.enum(['none', 'allowlist', 'open']), allowlistDigest: Digest.nullable() })
    .default({ mode: 'none', allowlistDigest: null }),
  /** Lease env: the sorted variable names and the digest of the whole map (values stay out). */
  env: z.object({ keys: z.array(z.string()), digest: Digest }),
  /** Names of the secrets granted to the lease, sorted; never values nor digests of values. */
  secretRefs: z.array(z.string()),
  /** The snapshot the sandbox started from (its id, image digest and the lease it was taken of), else null. */
  snapshot: z.object({ id: z.string(), digest: z.string(), parentLeaseId: z.string() }).nullable().default(null),
  /** Every writable root, in mount order; manifests stored before this field existed read as []. */
  writableRoots: z.array(WritableRootEntry).default([]),
  /** The policy phase the sandbox is in (a phased policy only; absent otherwise). */
  phase: z.string().optional(),
  createdAt: Timestamp,
  digest: Digest,
});
export type EnvironmentManifest = z.infer<typeof EnvironmentManifest>;

/** An earlier manifest of a lease whose policy or phase changed while it ran: its digest, policy and phase, and until when it held. */
export const ManifestHistoryEntry = z.object({
  digest: Digest,
  policy: PolicyRef,
  phase: z.string().nullable(),
  until: Timestamp,
  /** `policy_changed` (`POST /v1/sandboxes/:id/policy`) or `phase_moved` (`POST /v1/sandboxes/:id/phase`). */
  reason: z.enum(['policy_changed', 'phase_moved']),
});
export type ManifestHistoryEntry = z.infer<typeof ManifestHistoryEntry>;

/**
 * Where a lease is in its life: `pending` (recorded, nothing created yet) → `starting` (its
 * credentials, container and agent are being made) → `ready` → `releasing` (calls drained or
 * cancelled, container and credentials removed) → one of the terminal states: `released`,
 * `expired` (its TTL ran out), `failed` (it never became ready) or `lost` (its container
 * vanished or stopped on its own; calls that were running end `effect_unknown`). A ready
 * lease may be `paused` (every process frozen by the cgroup freezer; calls and files answer
 * `409 lease.paused`) and resumed back to `ready`; a paused lease may also be released or expire.
 */
export const LeaseStatus = z.enum(['pending', 'starting', 'ready', 'paused', 'releasing', 'released', 'expired', 'failed', 'lost']);
export type LeaseStatus = z.infer<typeof LeaseStatus>;

/** The states a lease never leaves. */
export const TERMINAL_LEASE_STATUSES: ReadonlySet<LeaseStatus> = new Set(['released', 'expired', 'failed', 'lost']);

/** A lease: one ephemeral sandbox bound to one policy version. */
/** What every lease id begins with (`sbx_` and 20 hex digits, made by the control plane). */
export const LEASE_ID_PREFIX = 'sbx_';

export const Lease = z.object({
  id: z.string(),
  status: LeaseStatus,
  createdAt: Timestamp,
  expiresAt: Timestamp,
  /** When the lease reached its terminal state. */
  endedAt: Timestamp.nullable(),
  /**
   * Why it ends, set when it starts to: `released` (a client), `expired` (its TTL),
   * `container_missing` / `container_exited` (status `lost`), `create_failed`,
   * `create_interrupted` (the control plane creating it died; status `failed`).
   */
  endReason: z.string().nullable(),
  image: z.string(),
  policy: PolicyRef,
  manifest: EnvironmentManifest.nullable(),
  labels: z.record(z.string(), z.string()),
  /**
   * While `paused`: when the pause began (null otherwise). `expiresAt` is then the end of the
   * pause budget (`resources.pausedTtlSeconds`); the running TTL left at the pause comes back on
   * resume.
   */
  pausedAt: Timestamp.nullable().default(null),
  /**
   * The tenant of the API key that created it; only that tenant's user keys (and admin keys)
   * see it. Records from before tenants existed read as `default`.
   */
  tenant: z.string().default('default'),
  /** The policy phase it is in (a phased policy), else null. */
  phase: z.string().nullable().default(null),
  /** The manifests it had before its policy or phase changed, oldest first; the current one is `manifest`. */
  manifestHistory: z.array(ManifestHistoryEntry).default([]),
});
export type Lease = z.infer<typeof Lease>;

/**
 * One transition of a lease's status, as `GET /v1/sandboxes/:id/events` lists them: `seq`
 * numbers a lease's events from 1 without gaps; `from` is null for the first (`pending`). A
 * renewal is an event from `ready` to `ready` (reason `renewed`, `details.expiresAt`).
 */
export const LeaseEvent = z.object({
  seq: z.number().int().positive(),
  at: Timestamp,
  from: LeaseStatus.nullable(),
  to: LeaseStatus,
  /**
   * Why: `created`, `starting`, `ready`, `renewed`, `paused`, `resumed` (also `pause_undone`:
   * the engine could not freeze it), `released`, `expired`, `container_missing`,
   * `container_exited`, `create_failed`, `create_interrupted`; within `releasing`:
   * `release_resumed` (another process took over the release of a dead one) and
   * `teardown_incomplete` (a step failed; reconcile finishes it).
   */
  reason: z.string(),
  details: z.record(z.string(), z.unknown()).default({}),
});
export type LeaseEvent = z.infer<typeof LeaseEvent>;

export const CommitState = z.enum(['not_started', 'committed', 'partial', 'unknown']);
export type CommitState = z.infer<typeof CommitState>;

export const ResultStatus = z.enum(['succeeded', 'failed', 'denied', 'cancelled', 'timed_out', 'detached', 'effect_unknown']);
export type ResultStatus = z.infer<typeof ResultStatus>;

/**
 * Per-stream output facts: all bytes of the stream, even past the kept limit, as they left the
 * sandbox — after secret redaction (each secret value replaced by `[REDACTED:name]`), so they
 * agree with the events, the result and the artifact and never fingerprint a secret value.
 */
export const StreamDigest = z.object({
  /** Bytes of the (redacted) stream; equal to what the process wrote when nothing was redacted. */
  bytes: z.number().int().nonnegative(),
  /** sha256 hex of all those bytes. */
  sha256: z.string(),
  /** Bytes kept in events and in the result (≤ `bytes`). */
  keptBytes: z.number().int().nonnegative(),
});

/**
 * The fact record of one attempt. `commitState` says what is known about the effect:
 * `not_started` (nothing ran), `committed` (ran to completion), `partial`, `unknown`
 * (interrupted: a timeout or cancel is not "no effect", docs/DESIGN.md invariant 2).
 */
export const EffectReceipt = z.object({
  receiptId: z.string(),
  callId: z.string(),
  attemptId: z.string(),
  leaseId: z.string(),
  tool: z.string(),
  toolVersion: z.string(),
  /** Digest of the resolved call (tool + normalized args). */
  fingerprint: Digest,
  commitState: CommitState,
  startedAt: Timestamp,
  endedAt: Timestamp,
  durationMs: z.number().nonnegative(),
  exit: z
    .object({ code: z.number().int().nullable(), signal: z.string().nullable(), killedBy: z.enum(['timeout', 'cancel']).nullable() })
    .nullable(),
  /** The environment the process saw: fixed defaults by value, caller/lease env by name only. */
  environment: z.object({ defaults: z.record(z.string(), z.string()), keys: z.array(z.string()) }).nullable(),
  runner: z.object({ pid: z.number().int().nullable(), uid: z.number().int(), gid: z.number().int() }).nullable(),
  /**
   * The output streams. `combined: true` (exec `combinedOutput`): stdout and stderr were one pipe,
   * in the order written, all counted under `stdout` (`stderr` is empty).
   */
  outputs: z.object({ stdout: StreamDigest, stderr: StreamDigest, combined: z.boolean().optional() }).nullable(),
  /** Files the call read or changed: sha256 before and after (null: absent). */
  versions: z.array(z.object({ path: z.string(), before: z.string().nullable(), after: z.string().nullable() })).default([]),
  /** Processes of the tool user still alive when the call ended, in its process group (`sleep 100 &`) or outside it (setsid, daemons): each one killed and counted once. */
  cleanup: z.object({ killedProcesses: z.number().int().nonnegative() }).nullable().default(null),
  artifacts: z.array(z.object({ id: z.string(), sha256: z.string(), size: z.number().int() })),
  /** Names of the secrets the attempt's process received (never values), sorted. */
  secretsUsed: z.array(z.string()).default([]),
  /** Secrets the egress proxy put into the call's requests (policy `secrets.inject`), by name and host; absent when none. */
  credentialsInjected: CredentialsInjected.optional(),
  manifestDigest: Digest,
});
export type EffectReceipt = z.infer<typeof EffectReceipt>;

/** Bytes kept outside the model's view, content-addressed and verified on arrival. */
/** Artifact ids: safe as file names and Redis keys. */
export const ArtifactId = z.string().regex(/^art_[a-z0-9]{8,64}$/);

export const Artifact = z.object({
  id: z.string(),
  leaseId: z.string(),
  callId: z.string(),
  name: z.string(),
  mediaType: z.string(),
  size: z.number().int().nonnegative(),
  /** Lower-case hex sha256 of the bytes. */
  sha256: z.string(),
  createdAt: Timestamp,
  /** Until when it is kept (retention), if its sandbox has ended. */
  expiresAt: Timestamp.nullable(),
});
export type Artifact = z.infer<typeof Artifact>;

/**
 * How a stream was cut for the result: `strategy: head` keeps its first `keptBytes` in the
 * result and events (the model text shows head and tail); `fullArtifact` names the artifact
 * holding the whole stream (up to the policy's cap; `artifactTruncated` when even that was cut).
 */
export const StreamTruncation = z.object({
  truncated: z.literal(true),
  originalBytes: z.number().int(),
  keptBytes: z.number().int(),
  strategy: z.literal('head'),
  fullArtifact: z.string().nullable(),
  artifactTruncated: z.boolean(),
});
export type StreamTruncation = z.infer<typeof StreamTruncation>;
export const Truncation = z.object({ stdout: StreamTruncation.nullable(), stderr: StreamTruncation.nullable() });

/** The normalized outcome of a call; `receipt` is the fact record behind it. */
export const ToolResult = z.object({
  callId: z.string(),
  status: ResultStatus,
  error: ErrorInfo.nullable(),
  /** Short, lossy text for a model to read. The receipt is the record. */
  modelText: z.string(),
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  /** Decoded UTF-8 of the kept bytes (invalid sequences replaced). */
  stdout: z.string(),
  stderr: z.string(),
  truncation: Truncation.nullable(),
  /** The tool's structured output (file content, listing, matches, git status), null for exec. */
  data: z.record(z.string(), z.unknown()).nullable().default(null),
  artifacts: z.array(z.object({ id: z.string(), sha256: z.string(), size: z.number().int() })),
  receipt: EffectReceipt.nullable(),
});
export type ToolResult = z.infer<typeof ToolResult>;

/** `detached`: a background task handed back its handle and keeps running; `finished` comes when it ends. */
/** `pending_approval`: the policy's tool rules ask a human first (nothing queued until approved). */
export const CallStatus = z.enum(['pending_approval', 'queued', 'running', 'detached', 'finished']);
export type CallStatus = z.infer<typeof CallStatus>;

/** A call as the API shows it: the intent, its state and (once finished) its result. */
export const CallView = z.object({
  callId: z.string(),
  leaseId: z.string(),
  tool: z.string(),
  args: z.record(z.string(), z.unknown()),
  fingerprint: Digest,
  status: CallStatus,
  createdAt: Timestamp,
  /** The `detached` result a background task answered with (its handle), while and after it runs. */
  detached: ToolResult.nullable().default(null),
  result: ToolResult.nullable(),
});
export type CallView = z.infer<typeof CallView>;
