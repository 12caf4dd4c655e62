/**
 * The policy compiler: policy + lease → the container spec that enforces it. Pure: reads no
 * clock, no Docker, no Redis, so every rule here is unit-tested alone.
 *
 * Fails closed: a policy section this runtime cannot enforce throws AppError
 * `policy.unenforceable`; the sandbox is never started with less isolation than asked for.
 */
import { AGENT_COMMAND, AGENT_RUNTIME_BUSYBOX, AGENT_RUNTIME_DIR, AGENT_RUNTIME_INIT } from '../../contract/agent-runtime.js';
import { posix } from 'node:path';
import { AppError } from '../../contract/errors.js';
import { LINK_SOCKET_DIR } from '../../contract/link.js';
import { PREVIEW_SOCKET_DIR } from '../../contract/previews.js';
import type { PolicyRef } from '../../contract/objects.js';
import type { AgentConfig, ToolUser } from '../../contract/queue.js';
import { SBX_BRIDGE_PREFIX } from '../runtime/link-local-guard.js';
import { CREDENTIAL_TRUST, SECRET_FILES_DIR, SECRET_MAX_BYTES } from '../../contract/secrets.js';
import { LABEL, ownershipLabels, type Ownership, type SandboxSpec } from '../runtime/runtime.js';
import type { Policy } from './schema.js';
import { policyIntercepts } from '../egress/schema.js';

/**
 * Where the agent's credentials directory (holding `agent.json` until the agent has read it)
 * and the Redis socket directory appear inside a sandbox.
 */
export const AGENT_CONFIG_DIR = '/run/sbx/agent';
export const AGENT_CONFIG_PATH = `${AGENT_CONFIG_DIR}/agent.json`;
export const AGENT_REDIS_DIR = '/run/sbx/redis';
/** The agent's own scratch directory (output spooled for artifacts), on a disk-backed volume. */
export const AGENT_SPOOL_DIR = '/run/sbx/spool';
/** Where the lease's egress proxy socket directory appears inside a sandbox (mode `allowlist`). */
export const EGRESS_SOCKET_DIR = '/run/sbx/egress';
export const EGRESS_SOCKET_NAME = 'proxy.sock';
/** The agent's loopback port tools use as HTTP(S) proxy (the conventional squid port). */
export const EGRESS_PROXY_PORT = 3128;

export interface CompileInput {
  leaseId: string;
  /** `SBX_OWNER` and the installation id, written as the `sbx.owner` and `sbx.installation` labels. */
  ownership: Ownership;
  /** sbx version written to the `sbx.version` label. */
  sbxVersion: string;
  image: string;
  policy: Policy;
  policyRef: PolicyRef;
  /** Host directory holding this lease's agent credentials file. */
  agentConfigHostDir: string;
  /** Who the tools run as (resolved: the policy's, the image's `User`, or the default; leases/tool-user.ts). */
  toolUser: ToolUser;
  /** Host directory of the agent runtime (mounted read-only at AGENT_RUNTIME_DIR). */
  agentRuntimeDir: string;
  /** Host directory holding the Redis socket (and nothing else). */
  agentRedisSocketDir: string;
  /** Host directory where the control plane serves this lease's egress proxy socket. */
  egressSocketHostDir: string;
  /**
   * The node relay's sockets directory (contract/link.ts): mounted at LINK_SOCKET_DIR in place of
   * the Redis, egress and preview directories of the control plane's host.
   */
  agentRelayDir?: string;
  /** Host directory of this lease's port preview tunnel sockets (contract/previews.ts); mounted for every network mode. */
  previewSocketHostDir?: string;
  /** Host directory of the lease's trust files (egress/ca.ts), for a policy with `secrets.inject`. */
  trustHostDir?: string;
  /**
   * Read-only mounts: the host directories the control plane allows (`SBX_MOUNT_ALLOWLIST`,
   * symlinks resolved), each policy `hostPath` with symlinks resolved (null: it does not exist),
   * and the host paths no mount may contain (data dir, Docker and Redis sockets; resolved).
   */
  mounts: { allowlist: readonly string[]; realpaths: ReadonlyMap<string, string | null>; protectedPaths: readonly string[] };
  /** OCI runtimes the engine offers. */
  ociRuntimes: readonly string[];
  labels: Record<string, string>;
  /** Persistent volumes, bind-mounted from their host mount points (checked by the volumes domain). */
  volumeMounts?: ReadonlyArray<{ hostPath: string; containerPath: string; readOnly: boolean }>;
  /**
   * A lease started from a snapshot: the writable roots at `paths` start with what the snapshot
   * captured, kept in its image under `prefix` + path (whatever their `fromImage`).
   */
  seedFrom?: { prefix: string; paths: readonly string[] };
}

export function compileSandboxSpec(input: CompileInput): SandboxSpec {
  const { policy } = input;
  if (!input.ociRuntimes.includes(policy.runtime.oci)) {
    throw new AppError('policy.unenforceable', `OCI runtime "${policy.runtime.oci}" is not registered with the container engine`, {
      details: { field: 'runtime.oci', available: [...input.ociRuntimes] },
    });
  }
  const trustBinds = credentialTrustBinds(input);
  const mountBinds = policy.filesystem.readOnlyMounts.map((mount, i) => {
    const real = input.mounts.realpaths.get(mount.hostPath) ?? null;
    const field = `filesystem.readOnlyMounts.${i}.hostPath`;
    if (real === null)
      throw new AppError('policy.mount_not_allowed', `read-only mount ${mount.hostPath} does not exist on the host`, {
        details: { field, hostPath: mount.hostPath },
      });
    // Checked on the resolved path: a symlink inside an allowed directory leading out of it
    // does not make its target mountable.
    if (!input.mounts.allowlist.some((dir) => real === dir || real.startsWith(dir.endsWith('/') ? dir : `${dir}/`))) {
      throw new AppError(
        'policy.mount_not_allowed',
        `read-only mount ${mount.hostPath} (${real}) is not inside a directory of the mount allowlist`,
        {
          details: { field, hostPath: mount.hostPath, resolved: real, allowlist: [...input.mounts.allowlist] },
        },
      );
    }
    // The control plane's own state and sockets (Docker, Redis) are never mounted, even under an
    // allowlisted directory: a socket stays connectable through a read-only bind.
    const exposed = input.mounts.protectedPaths.find((p) => p === real || p.startsWith(real.endsWith('/') ? real : `${real}/`));
    if (exposed) {
      throw new AppError(
        'policy.mount_not_allowed',
        `read-only mount ${mount.hostPath} (${real}) would expose ${exposed}, which sandboxes never see`,
        { details: { field, hostPath: mount.hostPath, resolved: real } },
      );
    }
    return { hostPath: real, containerPath: mount.containerPath };
  });
  const user = input.toolUser;
  const tmpfs: Record<string, string> = {};
  // Disk, not memory: spooled output may be large; the agent caps what it keeps (maxArtifactBytes).
  const spool = {
    name: `sbx-${input.leaseId}-agent-spool`,
    mountPath: AGENT_SPOOL_DIR,
    backing: { tmpfs: false as const },
    uid: 0,
    gid: 0,
  };
  const volumes: SandboxSpec['volumes'] = [];
  for (const root of policy.filesystem.writableRoots) {
    if (root.kind === 'volume') {
      volumes.push({
        name: `sbx-${input.leaseId}-${volumeSlug(root.path)}`,
        mountPath: root.path,
        backing: { tmpfs: true, sizeBytes: root.sizeBytes },
        uid: user.uid,
        gid: user.gid,
      });
    } else {
      // /tmp is shared by every user (sticky bit, tmp(5) convention); other roots belong to the tool user.
      const owner = root.path === '/tmp' ? 'mode=1777' : `uid=${user.uid},gid=${user.gid},mode=0755`;
      // `exec` explicitly: Docker mounts a container tmpfs noexec unless told otherwise, which
      // breaks a venv or build tree in /tmp (its scripts get EACCES) and protects nothing, since
      // the tool user may write and run anything in /workspace.
      tmpfs[root.path] = `rw,exec,nosuid,nodev,size=${root.sizeBytes},${owner}`;
    }
  }
  if (policy.secrets.allowed.length > 0) {
    // File secrets live here only while a call that asks for them runs. Memory, never disk;
    // root-owned so only the agent writes; setgid with the tool user's group so the files the
    // agent creates are readable by the tool user (mode 0440) and by no one else; room for
    // every allowed secret at its largest.
    const sizeBytes = policy.secrets.allowed.length * (SECRET_MAX_BYTES + 4096);
    tmpfs[SECRET_FILES_DIR] = `rw,noexec,nosuid,nodev,size=${sizeBytes},uid=0,gid=${user.gid},mode=2750`;
  }
  return {
    leaseId: input.leaseId,
    name: `sbx-${input.leaseId}`,
    image: input.image,
    ownership: input.ownership,
    labels: {
      ...input.labels,
      [LABEL.lease]: input.leaseId,
      ...ownershipLabels(input.ownership),
      [LABEL.version]: input.sbxVersion,
      [LABEL.policy]: `${input.policyRef.name}@${input.policyRef.version}`,
    },
    env: { SBX_AGENT_CONFIG: AGENT_CONFIG_PATH },
    // `env -i`: the agent starts with none of the image's Env (an LD_PRELOAD or NODE_OPTIONS of
    // the image must not reach it); the image's Env reaches the tools through the agent config.
    command: [
      AGENT_RUNTIME_INIT,
      '-g',
      '--',
      AGENT_RUNTIME_BUSYBOX,
      'env',
      '-i',
      `SBX_AGENT_CONFIG=${AGENT_CONFIG_PATH}`,
      ...AGENT_COMMAND,
    ],
    network:
      policy.network.mode === 'open'
        ? { mode: 'bridge', bridgeInterface: `${SBX_BRIDGE_PREFIX}${input.leaseId.replace(/^sbx_/, '').slice(0, 10)}` }
        : { mode: 'none' },
    readOnlyRoot: policy.filesystem.readOnlyRoot,
    tmpfs,
    volumes: [...volumes, spool],
    readOnlyBinds: [
      { hostPath: input.agentRuntimeDir, containerPath: AGENT_RUNTIME_DIR },
      { hostPath: input.agentConfigHostDir, containerPath: AGENT_CONFIG_DIR },
      ...(input.agentRelayDir === undefined
        ? hostSocketBinds(input, policy)
        : [{ hostPath: input.agentRelayDir, containerPath: LINK_SOCKET_DIR }]),
      ...mountBinds,
      ...trustBinds,
    ],
    volumeBinds: (input.volumeMounts ?? []).map((m) => ({ hostPath: m.hostPath, containerPath: m.containerPath, readOnly: m.readOnly })),
    ociRuntime: policy.runtime.oci,
    nodeLabels: { ...policy.runtime.nodeLabels },
    capAdd: [...policy.runtime.capabilities],
    noNewPrivileges: policy.runtime.noNewPrivileges,
    nanoCpus: Math.round(policy.resources.cpus * 1e9),
    memoryBytes: policy.resources.memoryBytes,
    pidsLimit: policy.resources.pids,
    openFiles: policy.resources.openFiles,
    seedRoots: policy.filesystem.writableRoots.flatMap((r) => {
      if (input.seedFrom?.paths.includes(r.path))
        return [{ path: r.path, sizeBytes: r.sizeBytes, from: `${input.seedFrom.prefix}${r.path}` }];
      return r.fromImage ? [{ path: r.path, sizeBytes: r.sizeBytes }] : [];
    }),
    seedUser: { uid: user.uid, gid: user.gid },
  };
}

/**
 * The lease CA's trust files (egress/ca.ts) for a policy with `secrets.inject`: the directory at
 * CREDENTIAL_TRUST.dir, and its bundle over the system bundle (Debian's path, which OpenSSL,
 * curl, git, Python and pip read by default). Throws `policy.unenforceable` where the sandbox
 * does not run beside the control plane (a node relay: the files would not be on its node).
 */
function credentialTrustBinds(input: CompileInput): SandboxSpec['readOnlyBinds'] {
  if (!policyIntercepts(input.policy)) return [];
  if (input.agentRelayDir !== undefined || input.trustHostDir === undefined) {
    const field = (input.policy.secrets.inject ?? []).length > 0 ? 'secrets.inject' : 'network.allow';
    throw new AppError(
      'policy.unenforceable',
      'TLS interception (secrets.inject, network.allow[].http) needs sandboxes on the control plane’s machine (the Docker driver)',
      {
        details: { field },
      },
    );
  }
  return [
    { hostPath: input.trustHostDir, containerPath: CREDENTIAL_TRUST.dir },
    { hostPath: posix.join(input.trustHostDir, CREDENTIAL_TRUST.files.bundle), containerPath: CREDENTIAL_TRUST.systemBundle },
  ];
}

/** The control plane's host socket directories a sandbox on its machine reaches the agent channel through. */
function hostSocketBinds(input: CompileInput, policy: Policy): SandboxSpec['readOnlyBinds'] {
  return [
    { hostPath: input.agentRedisSocketDir, containerPath: AGENT_REDIS_DIR },
    // A directory, not the socket file: a peer control plane that takes the proxy over binds a
    // new socket at the same path, and the sandbox sees it.
    ...(policy.network.mode === 'allowlist' ? [{ hostPath: input.egressSocketHostDir, containerPath: EGRESS_SOCKET_DIR }] : []),
    // Previews: a directory too, where each control-plane process serving the lease binds a socket of its own.
    ...(input.previewSocketHostDir === undefined ? [] : [{ hostPath: input.previewSocketHostDir, containerPath: PREVIEW_SOCKET_DIR }]),
  ];
}

function volumeSlug(path: string): string {
  return (
    path
      .replace(/^\/+/, '')
      .replace(/[^a-zA-Z0-9]+/g, '-')
      .toLowerCase() || 'root'
  );
}

/** The agent's egress settings for `policy`: its proxy listener, the socket it forwards to, and whether tools get the lease CA's variables. */
export function agentEgress(policy: Policy): AgentConfig['egress'] {
  if (policy.network.mode !== 'allowlist') return null;
  const trust = policyIntercepts(policy);
  return { port: EGRESS_PROXY_PORT, socketPath: `${EGRESS_SOCKET_DIR}/${EGRESS_SOCKET_NAME}`, ...(trust ? { trust } : {}) };
}
