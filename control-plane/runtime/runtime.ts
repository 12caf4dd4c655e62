/**
 * The runtime driver interface (the port): what the lease service needs from a container runtime.
 * Docker implements it (docker-runtime.ts), and Kubernetes (kubernetes-runtime.ts); drivers.ts
 * picks one by `SBX_RUNTIME`. Specs are compiled from policies by policies/compiler.ts.
 */
import { AppError } from '../../contract/errors.js';

/**
 * A per-lease volume: a writable root (size-limited tmpfs, counted as the sandbox's memory) or
 * the agent's spool (disk, size kept by the agent).
 */
export interface VolumeSpec {
  name: string;
  mountPath: string;
  backing: { tmpfs: true; sizeBytes: number } | { tmpfs: false };
  uid: number;
  gid: number;
}

/** Everything needed to create one sandbox container, runtime-neutral where it can be. */
export interface SandboxSpec {
  leaseId: string;
  name: string;
  image: string;
  /**
   * The image the plan read its config from, pinned: on Docker its local id (`sha256:…`), on a
   * cluster the registry digest `inspectImage` read (its first `repoDigests` entry), when it has
   * one. Drivers create from this, so a tag moved meanwhile cannot change what runs: the manifest
   * describes the image that runs.
   */
  pinnedImage?: string;
  /** Whose sandbox this is; its labels are in `labels` and on the volumes and network too. */
  ownership: Ownership;
  labels: Record<string, string>;
  /** The container's own env (the image's Env is merged in by the engine, and overridden by these). */
  env: Record<string, string>;
  /**
   * What the container runs, as root, whatever the image's `Entrypoint`, `Cmd` and `User` say
   * (those are recorded in the manifest, not run): the agent from the read-only runtime mount.
   */
  command: string[];
  /**
   * `none`: loopback only. `bridge`: a network of this sandbox's own (no other container on
   * it), on a host bridge interface named `bridgeInterface` (an `sbxbr` name, ≤ 15 characters,
   * IFNAMSIZ), with link-local destinations dropped by the host firewall.
   */
  network: { mode: 'none' } | { mode: 'bridge'; bridgeInterface: string };
  readOnlyRoot: boolean;
  /** Container tmpfs mounts: path → mount options (`size=…,mode=…`). */
  tmpfs: Record<string, string>;
  volumes: VolumeSpec[];
  /** Host path → container path, read-only bind mounts (agent credentials, Redis socket dir). */
  readOnlyBinds: Array<{ hostPath: string; containerPath: string }>;
  /** Persistent volumes: a host directory (a volume's mounted filesystem) → container path, read-only or not. */
  volumeBinds?: Array<{ hostPath: string; containerPath: string; readOnly: boolean }>;
  ociRuntime: 'runc' | 'runsc';
  /** Labels the node must carry (policy `runtime.nodeLabels`); only a driver with nodes can honour them. */
  nodeLabels: Record<string, string>;
  capAdd: string[];
  noNewPrivileges: boolean;
  nanoCpus: number;
  memoryBytes: number;
  pidsLimit: number;
  openFiles: number;
  /**
   * Writable roots (volume or tmpfs, already in `volumes`/`tmpfs`) that start with the image's
   * content at their path, copied in once the container runs, owned by `seedUser` (the tool
   * user). A root whose content does not fit its `sizeBytes` fails the start. `from`: where in
   * the image the content is read (a snapshot keeps each root's under `/.sbx-snapshot/roots`);
   * default `path`.
   */
  seedRoots: Array<{ path: string; sizeBytes: number; from?: string }>;
  seedUser: RunAs;
}

/** What `start` made: the container, and which `seedRoots` had content in the image (copied in). */
export interface Started {
  containerId: string;
  seededPaths: string[];
}

/**
 * Where a snapshot's seeding names each writable root (`<prefix><root path>`): its archive on the
 * host (snapshot-roots.ts), or, in a snapshot made before the archives, that path in its image.
 */
export const SNAPSHOT_ROOTS_PREFIX = '/.sbx-snapshot/roots';

/** What `snapshot` needs: whose sandbox, which writable roots, as whom, and the image's labels. */
export interface SnapshotCapture {
  leaseId: string;
  ownership: Ownership;
  /** Writable roots to capture (absolute paths). */
  roots: readonly string[];
  /** Who archives the roots in the sandbox (the tool user). */
  user: RunAs;
  /** Labels of the snapshot image (`sbx.snapshot.*`). */
  labels: Record<string, string>;
}

export interface CapturedImage {
  /** `sbx-snapshot:<hex>`. */
  ref: string;
  /** The image id, `sha256:…`. */
  imageId: string;
  /** The snapshot's content address: the digest of the image id and each root's archive SHA-256 (snapshot-image.ts). */
  digest: string;
  /** Bytes the snapshot adds to the image it was leased from: its own layers and its roots' archives. */
  sizeBytes: number;
}

/** The numeric identity a transfer runs as inside the sandbox. */
export interface RunAs {
  uid: number;
  gid: number;
}

/**
 * What the runtime holds for some lease, as found by label: its container, or (a create or
 * teardown cut short) only volumes or a network, with `containerId` null.
 */
export interface OwnedSandbox {
  leaseId: string;
  containerId: string | null;
  /** The container is alive: running, or paused (a snapshot's commit pauses it for a moment). */
  running: boolean;
  /** Running with every process frozen (`docker pause`). */
  paused: boolean;
  /** The node it runs on: the Kubernetes driver's Pod's `spec.nodeName` (null while not scheduled), `local` for the one Docker engine. */
  node: string | null;
}

/** Whether the runtime can checkpoint a sandbox's memory, and if not, what it lacks (one line each). */
export interface CheckpointSupport {
  supported: boolean;
  missing: string[];
}

/**
 * An image as the engine has it: its id and the parts of its config a sandbox honours (`env`:
 * the tools' environment; `workingDir`: their default cwd; `user`: the tool user when the
 * policy names none) or records (`labels`, `entrypoint`, `cmd`: never run).
 */
export interface ImageConfig {
  /** Local image id, `sha256:…`. */
  id: string;
  /** The image's `Env`, as a map (a later duplicate name wins, as in Docker). */
  env: Record<string, string>;
  /** `WorkingDir`; null when unset. */
  workingDir: string | null;
  /** `User` (`name`, `uid`, `uid:gid`, ...); null when unset. */
  user: string | null;
  labels: Record<string, string>;
  entrypoint: string[] | null;
  cmd: string[] | null;
  /** `repo@sha256:…` digests the image is known by in registries (empty for an image built or imported here). */
  repoDigests: string[];
}

export interface RuntimeInfo {
  engineVersion: string;
  /** OCI runtimes the engine has registered (`runc`, `runsc`, ...). */
  ociRuntimes: string[];
}

export interface SandboxRuntime {
  /** Throws AppError `runtime.unavailable` when the engine does not answer. */
  info(): Promise<RuntimeInfo>;
  /**
   * Removes what the driver recorded of images the engine no longer has (Docker: the image
   * survey, image-survey.ts; Kubernetes records nothing). Returns how many images' records went.
   */
  sweepImageSurvey(): Promise<number>;
  /** The image `ref` as the engine has it. Throws AppError `image.not_found`, `runtime.unavailable`. */
  inspectImage(ref: string): Promise<ImageConfig>;
  /**
   * The contents of `paths` in image `ref`, read without running it (null: absent or not a
   * regular file), through a container never started that carries `ownership`'s labels.
   * Throws AppError `runtime.unavailable`.
   */
  readImageFiles(ref: string, paths: string[], ownership: Ownership): Promise<Array<string | null>>;
  /**
   * Creates the volumes and the container, starts it and fills its `seedRoots` from the image.
   * Leaves nothing behind when it throws: `lease.writable_root_full` (the image's content at a
   * root does not fit its size), `image.not_found`, `lease.create_failed` (`agentExitedError`
   * when the sandbox's agent exited meanwhile).
   */
  start(spec: SandboxSpec): Promise<Started>;
  /**
   * Resolves when the lease's container stops, with its exit code and its last log lines (the
   * agent's fatal error, typically). Never rejects; resolves with code null if it cannot tell
   * or when `signal` aborts (which ends the wait and frees its connection).
   */
  exited(leaseId: string, signal?: AbortSignal): Promise<{ exitCode: number | null; logTail: string }>;
  /**
   * Removes the lease's container, volumes and network, those that carry `ownership`'s labels
   * (another installation's, or one made before installation ids, are left alone). Absence is
   * success; every step runs even when one fails.
   */
  remove(leaseId: string, ownership: Ownership): Promise<void>;
  /** One entry per lease that has a container, volume or network carrying both labels of `ownership`. */
  listOwned(ownership: Ownership): Promise<OwnedSandbox[]>;
  /**
   * Freezes every process of the lease's container (cgroup freezer); paused already is
   * success. Throws AppError `lease.not_ready` (no running container), `runtime.unavailable`.
   */
  pause(leaseId: string): Promise<void>;
  /** Thaws the lease's container; not paused is success. Throws as `pause`. */
  unpause(leaseId: string): Promise<void>;
  /** Whether memory checkpoints work on this engine (docker-freezer.ts). Throws `runtime.unavailable`. */
  checkpointSupport(): Promise<CheckpointSupport>;
  /** Checkpoints the running container's memory as `checkpointId` (only when supported). Throws as `pause`. */
  checkpoint(leaseId: string, checkpointId: string): Promise<void>;
  /**
   * Captures the lease's sandbox as a snapshot image (its changed files and every writable root;
   * see snapshot-image.ts), while it keeps running. Throws `snapshot.capture_failed`, `lease.not_ready`.
   */
  snapshot(capture: SnapshotCapture): Promise<CapturedImage>;
  /**
   * Bytes the lease's writable roots `paths` hold now (their filesystems' use): what a snapshot
   * reserves of the tenant's quota before its capture. An estimate; throws when it cannot tell.
   */
  snapshotBytesEstimate(leaseId: string, paths: readonly string[]): Promise<number>;
  /** Removes a snapshot image by its ref; absence is success. Throws `snapshot.in_use` while a container uses it. */
  removeSnapshot(ref: string): Promise<void>;
  /** Stops what the driver keeps open (a watch); absent when it keeps nothing. */
  close?(): Promise<void>;
}

/**
 * Labels on everything sbx creates, used to find and reap it: `sbx.lease`, `sbx.owner`
 * (`SBX_OWNER`), `sbx.installation` (the installation id, control-plane/installation/),
 * `sbx.version`, `sbx.policy`.
 */
export const LABEL = {
  lease: 'sbx.lease',
  owner: 'sbx.owner',
  installation: 'sbx.installation',
  version: 'sbx.version',
  policy: 'sbx.policy',
  /**
   * On helper containers that are never started: `seed` (a create reads the image's content
   * through it, seed-roots.ts); `snapshot` was a snapshot's staging container (none is made now;
   * one left by an older version is reaped like the others); and on `build-proxy`, the running
   * network helper of an image build (build-proxy.ts; no lease label).
   */
  role: 'sbx.role',
} as const;

/**
 * Whose sandboxes: the `sbx.owner` setting and the installation id. The owner alone does not
 * tell two installations apart (both may keep the default `sbx`); the id does, since it is
 * made once per ledger (Redis and key prefix). Everything found, reaped or removed by label
 * must carry both.
 */
export interface Ownership {
  owner: string;
  installation: string;
}

/** The labels of `ownership`, as written on every container, volume and network. */
export function ownershipLabels(ownership: Ownership): Record<string, string> {
  return { [LABEL.owner]: ownership.owner, [LABEL.installation]: ownership.installation };
}

/** `ownership`'s labels as `key=value` selectors (Docker label filters, Kubernetes label selectors: each must match). */
export function ownershipSelectors(ownership: Ownership): string[] {
  return Object.entries(ownershipLabels(ownership)).map(([key, value]) => `${key}=${value}`);
}

/**
 * The error of a sandbox whose agent exited before it was ready: `lease.create_failed` with its
 * exit code (null: unknown) and its last log lines (`details.agentLog`, the agent's fatal error
 * typically). Thrown by the lease's boot (leases/provision.ts) and by a runtime's `start` that
 * failed because of it (a copy into a sandbox whose agent died fails too, less tellingly).
 */
export function agentExitedError(exitCode: number | null, logTail: string): AppError {
  return new AppError(
    'lease.create_failed',
    `the sandbox agent exited (code ${exitCode ?? '?'}) before it was ready: ${logTail.slice(-500) || 'no output'}`,
    { details: { exitCode, agentLog: logTail.slice(-2000) } },
  );
}
