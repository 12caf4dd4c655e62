/**
 * A sandbox as a Kubernetes Pod: the pure half of the Kubernetes driver (kubernetes-runtime.ts
 * does the API calls). Only core/v1 Pod fields that Kubernetes 1.20 already has, so the driver
 * works on the lab's 1.20.2 and on today's clusters alike.
 *
 * What the Pod API cannot say is enforced or checked another way, never dropped:
 * - **Sizes of writable roots.** A memory-backed `emptyDir` with `sizeLimit` is a tmpfs of that
 *   size only where the kubelet has `SizeMemoryBackedVolumes` (alpha in 1.20, default on from
 *   1.22); elsewhere it is unsized and the limit is only an eviction. The prepare step (below)
 *   measures each root's filesystem and refuses one larger than its size: `policy.unenforceable`.
 * - **Network `none`.** Pods get the network of their node's CNI (`SBX_K8S_NODE_SELECTOR` picks
 *   nodes whose CNI gives pods no route: Kubernetes needs a Pod IP, so an interface that goes
 *   nowhere, where Docker gives none). The prepare step, which shares the Pod's network namespace,
 *   refuses a Pod with any route, IPv4 or IPv6, but on loopback.
 * - **Open files.** No Pod field: the agent starts under `ulimit -n` (busybox sh), which every tool inherits.
 * - **Processes.** No per-Pod field in 1.20 (the kubelet's `--pod-max-pids` is per node). The
 *   prepare step reads the Pod's pids cgroup limit and refuses one above the policy's. Where no
 *   pids cgroup is visible (gVisor shows none), it takes the limit the admin declares the nodes
 *   enforce (`nodePidsLimit`), and refuses when there is none or it is above the policy's.
 * - **gVisor.** A node label or a RuntimeClass only says where and how a Pod should run: for a
 *   `runsc` policy the prepare step checks that its kernel is gVisor's (the first line of the
 *   kernel log gVisor serves any process, which a Linux kernel refuses without CAP_SYSLOG) and
 *   refuses the Pod otherwise.
 * - **Network `bridge`** (policy mode `open`): refused here, `policy.unenforceable`.
 * - **Persistent volumes**: `runtime.unsupported`.
 *
 * The prepare step is an init container of the sandbox's own image running the agent runtime's
 * busybox as root with CHOWN, FOWNER and DAC_OVERRIDE only: it makes each writable root the
 * owner and mode the Docker driver gives it, fills the roots that start with the image's content
 * (copied from the image, then owned by the tool user, as seed-roots.ts does), and runs the
 * checks above. Its exit code says which check failed (PREPARE_EXIT).
 */
import type { V1Container, V1Pod, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { AGENT_RUNTIME_BUSYBOX, AGENT_RUNTIME_DIR } from '../../contract/agent-runtime.js';
import { AppError } from '../../contract/errors.js';
import { LABEL, type SandboxSpec } from './runtime.js';
import { isLabelValue } from './schema.js';

/** Exit codes of the prepare step, read back by the driver. */
export const PREPARE_EXIT = { sizeUnenforced: 90, rootFull: 91, networkOpen: 92, pidsUnenforced: 93, runtimeUnenforced: 94 } as const;
/** The init container's name, and the sandbox container's. */
export const PREPARE_CONTAINER = 'sbx-prepare';
export const SANDBOX_CONTAINER = 'sandbox';
/** The annotation holding every label of the spec as JSON (a label value Kubernetes cannot hold, such as `sbx.policy`'s `@`, lives only here). */
export const LABELS_ANNOTATION = 'sbx.dev/labels';
/** Where the prepare step sees root number `i`. */
const PREPARE_MOUNT = '/sbx-prepare';

export interface PodOptions {
  namespace: string;
  /** `IfNotPresent`, `Always` or `Never`: how nodes get the image (by reference; nothing is copied to nodes). */
  imagePullPolicy: 'IfNotPresent' | 'Always' | 'Never';
  /** Node labels every sandbox Pod requires (e.g. the loopback-only CNI's), besides `sbx.runtime`. */
  nodeSelector: Record<string, string>;
  /** The RuntimeClass a sandbox of an OCI runtime names (SBX_K8S_RUNTIME_CLASSES); without one, nodes labelled `sbx.runtime` run it. */
  runtimeClasses: Partial<Record<'runc' | 'runsc', string>>;
  /** How long a sandbox stays bound to a node that stopped answering before Kubernetes evicts it, s. */
  nodeLostAfterSeconds: number;
  /** The share of the CPU limit a Pod requests (0 < x ≤ 1); memory is requested whole. */
  cpuRequestFraction: number;
  /** The pids limit the admin declares the nodes enforce per container, for sandboxes that cannot see theirs (gVisor); null: none declared. */
  nodePidsLimit: number | null;
  /**
   * The agent's config directory as a Secret instead of its host directory (a node has not got
   * the control plane's files): the Secret's name and the directory's path in the sandbox.
   */
  configSecret?: { name: string; mountPath: string };
}

/** A Pod's name from a lease id (`sbx_` + hex): DNS-1123, lowercase, `_` turned into `-`. */
export function podName(leaseId: string): string {
  return `sbx-${leaseId.toLowerCase().replace(/[^a-z0-9-]/g, '-')}`;
}

/** Whether `key` may be a Kubernetes label key without a prefix (what sbx's `sbx.*` keys are). */
function isLabelKey(key: string): boolean {
  return key.length <= 63 && /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(key);
}

/** A writable root as the Pod sees it: an emptyDir, its path, owner, mode, and the checks it gets. */
interface Root {
  volume: string;
  path: string;
  uid: number;
  gid: number;
  mode: string;
  /** Its size, bytes, checked against its filesystem; null for the agent's disk-backed spool (the agent keeps its size). */
  sizeBytes: number | null;
  /** Where in the image its starting content is; null: it starts empty. */
  seedFrom: string | null;
}

/**
 * The Pod that runs `spec`. Throws AppError `policy.unenforceable` (network `bridge`; a label of
 * the lease, owner or installation that Kubernetes cannot hold) and `runtime.unsupported`
 * (persistent volumes).
 */
export function podOf(spec: SandboxSpec, options: PodOptions): V1Pod {
  if (spec.network.mode !== 'none')
    throw new AppError(
      'policy.unenforceable',
      'the Kubernetes driver runs sandboxes with network none only: a network of its own per sandbox (policy network mode open) is not made',
      { details: { field: 'network.mode', runtime: 'kubernetes' } },
    );
  const runtimeClass = options.runtimeClasses[spec.ociRuntime];
  // The admin's node selector says where sandboxes may run at all (e.g. the nodes whose CNI gives no route): a policy narrows it, never moves it.
  const clash = Object.keys(spec.nodeLabels).filter((k) => k in options.nodeSelector && options.nodeSelector[k] !== spec.nodeLabels[k]);
  if (clash.length > 0)
    throw new AppError('policy.unenforceable', `the policy's node labels contradict SBX_K8S_NODE_SELECTOR on ${clash.join(', ')}`, {
      details: { field: 'runtime.nodeLabels', runtime: 'kubernetes', labels: clash },
    });
  if ((spec.volumeBinds ?? []).length > 0)
    throw new AppError('runtime.unsupported', 'the Kubernetes driver has no persistent volumes', {
      details: { feature: 'volumes', runtime: 'kubernetes' },
    });
  const roots = rootsOf(spec);
  const volumes: V1Volume[] = [
    ...roots.map((r): V1Volume => ({
      name: r.volume,
      emptyDir: r.sizeBytes === null ? {} : { medium: 'Memory', sizeLimit: String(r.sizeBytes) },
    })),
    ...spec.readOnlyBinds.map((b, i): V1Volume =>
      b.containerPath === options.configSecret?.mountPath
        ? { name: `bind-${i}`, secret: { secretName: options.configSecret.name, defaultMode: 0o400 } }
        : { name: `bind-${i}`, hostPath: { path: b.hostPath, type: 'Directory' } },
    ),
  ];
  const runtimeVolume = `bind-${spec.readOnlyBinds.findIndex((b) => b.containerPath === AGENT_RUNTIME_DIR)}`;
  if (runtimeVolume === 'bind--1') throw new Error('the sandbox spec mounts no agent runtime');
  const mounts: V1VolumeMount[] = [
    ...roots.map((r) => ({ name: r.volume, mountPath: r.path })),
    ...spec.readOnlyBinds.map((b, i) => ({ name: `bind-${i}`, mountPath: b.containerPath, readOnly: true })),
  ];
  const prepare: V1Container = {
    name: PREPARE_CONTAINER,
    image: spec.image,
    imagePullPolicy: options.imagePullPolicy,
    command: [
      AGENT_RUNTIME_BUSYBOX,
      'sh',
      '-c',
      PREPARE_SCRIPT,
      `${spec.pidsLimit}:${options.nodePidsLimit ?? '-'}`,
      `${spec.seedUser.uid}:${spec.seedUser.gid}`,
      spec.ociRuntime,
      ...roots.flatMap(prepareArgs),
    ],
    volumeMounts: [
      ...roots.map((r, i) => ({ name: r.volume, mountPath: `${PREPARE_MOUNT}/${i}` })),
      { name: runtimeVolume, mountPath: AGENT_RUNTIME_DIR, readOnly: true },
    ],
    resources: resourcesOf(spec, options.cpuRequestFraction),
    // A failed check's stderr line becomes the status's termination message, which the driver reports.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    // The Pod's own address: the one host route the network check accepts (gVisor lists it in the main table).
    env: [{ name: 'SBX_POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }],
    securityContext: {
      runAsUser: 0,
      runAsGroup: 0,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'], add: ['CHOWN', 'FOWNER', 'DAC_OVERRIDE'] },
    },
  };
  const sandbox: V1Container = {
    name: SANDBOX_CONTAINER,
    image: spec.image,
    imagePullPolicy: options.imagePullPolicy,
    // No Pod field limits open files: the agent starts under ulimit -n, and every tool inherits it.
    command: [AGENT_RUNTIME_BUSYBOX, 'sh', '-c', 'ulimit -n "$0" && exec "$@"', String(spec.openFiles), ...spec.command],
    env: Object.entries(spec.env).map(([name, value]) => ({ name, value })),
    workingDir: '/',
    volumeMounts: mounts,
    resources: resourcesOf(spec, options.cpuRequestFraction),
    securityContext: {
      // The agent runs as root and drops every tool to the tool user, as in the Docker driver.
      runAsUser: 0,
      runAsGroup: 0,
      allowPrivilegeEscalation: !spec.noNewPrivileges,
      privileged: false,
      readOnlyRootFilesystem: spec.readOnlyRoot,
      capabilities: { drop: ['ALL'], add: [...spec.capAdd] },
    },
  };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName(spec.leaseId),
      namespace: options.namespace,
      labels: podLabels(spec),
      annotations: { [LABELS_ANNOTATION]: JSON.stringify(spec.labels) },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      shareProcessNamespace: false,
      terminationGracePeriodSeconds: 5,
      // A RuntimeClass places and runs the sandbox by its own handler and scheduling; else the nodes labelled for the runtime do.
      ...(runtimeClass === undefined ? {} : { runtimeClassName: runtimeClass }),
      nodeSelector: {
        ...spec.nodeLabels,
        ...options.nodeSelector,
        ...(runtimeClass === undefined ? { 'sbx.runtime': spec.ociRuntime } : {}),
      },
      // A node lost or not ready evicts its sandboxes after this long, where Kubernetes' default is 300 s.
      tolerations: ['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'].map((key) => ({
        key,
        operator: 'Exists',
        effect: 'NoExecute',
        tolerationSeconds: options.nodeLostAfterSeconds,
      })),
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
      initContainers: [prepare],
      containers: [sandbox],
      volumes,
    },
  };
}

/**
 * The spec's `sbx.*` labels that Kubernetes can hold (those sbx selects by must be among them).
 * A tenant's own labels stay in the annotation only: as Pod labels they could put the sandbox
 * under a Service's, a NetworkPolicy's or a disruption budget's selector.
 */
function podLabels(spec: SandboxSpec): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const [key, value] of Object.entries(spec.labels))
    if (key.startsWith('sbx.') && isLabelKey(key) && isLabelValue(value)) labels[key] = value;
  for (const key of [LABEL.lease, LABEL.owner, LABEL.installation])
    if (labels[key] === undefined)
      throw new AppError('policy.unenforceable', `label ${key}=${spec.labels[key] ?? ''} is not a valid Kubernetes label value`, {
        details: { field: key, runtime: 'kubernetes' },
      });
  return labels;
}

function resourcesOf(spec: SandboxSpec, cpuRequestFraction: number): V1Container['resources'] {
  const milliCpus = (fraction: number): string => `${Math.max(1, Math.round((spec.nanoCpus / 1e6) * fraction))}m`;
  const memory = String(spec.memoryBytes);
  return { limits: { cpu: milliCpus(1), memory }, requests: { cpu: milliCpus(cpuRequestFraction), memory } };
}

/** Every writable root of `spec`: its volumes (tmpfs-backed or the disk spool) and its tmpfs mounts. */
function rootsOf(spec: SandboxSpec): Root[] {
  const seeds = new Map(spec.seedRoots.map((s) => [s.path, s.from ?? s.path]));
  const volumeRoots = spec.volumes.map((v, i): Root => ({
    volume: `root-${i}`,
    path: v.mountPath,
    uid: v.uid,
    gid: v.gid,
    mode: '0755',
    sizeBytes: v.backing.tmpfs ? v.backing.sizeBytes : null,
    seedFrom: seeds.get(v.mountPath) ?? null,
  }));
  const tmpfsRoots = Object.entries(spec.tmpfs).map(([path, options], i): Root => {
    const option = (name: string): string | undefined =>
      options
        .split(',')
        .find((o) => o.startsWith(`${name}=`))
        ?.slice(name.length + 1);
    const size = Number(option('size'));
    if (!Number.isSafeInteger(size) || size <= 0) throw new Error(`tmpfs ${path} has no size (${options})`);
    return {
      volume: `tmpfs-${i}`,
      path,
      uid: Number(option('uid') ?? 0),
      gid: Number(option('gid') ?? 0),
      mode: option('mode') ?? '1777',
      sizeBytes: size,
      seedFrom: seeds.get(path) ?? null,
    };
  });
  return [...volumeRoots, ...tmpfsRoots];
}

/** The prepare script's five arguments for one root (PREPARE_SCRIPT reads them in order). */
function prepareArgs(r: Root): string[] {
  return [r.path, String(r.uid), String(r.gid), r.mode, r.sizeBytes === null ? '-' : String(r.sizeBytes), r.seedFrom ?? '-'];
}

/**
 * `$0` the policy's pids limit and the one the nodes are declared to enforce (`512:512`; `-`: none
 * declared), `$1` who owns content copied from the image (`uid:gid`, the tool user),
 * then per root: its path, the uid, gid and mode of its top directory, its size (`-`: not
 * checked), and the image path of its content (`-`: none); root `i` is mounted at PREPARE_MOUNT/i. Exits with a
 * PREPARE_EXIT code and a line on stderr (the Pod's log) when a check fails.
 */
const PREPARE_SCRIPT = [
  // Only the runtime's busybox: the image may have no utilities (or other ones).
  `set -u; pids="\${0%%:*}"; declared="\${0#*:}"; seeder="$1"; oci="$2"; shift 2; i=0; bb=${AGENT_RUNTIME_BUSYBOX}`,
  // gVisor, where the policy asks for it: its kernel log starts so for any process (Linux refuses the read without CAP_SYSLOG).
  'if [ "$oci" = runsc ]; then',
  '  case "$("$bb" dmesg 2>/dev/null | "$bb" head -n 1)" in',
  '    *"Starting gVisor..."*) ;;',
  '    *) echo "the policy asks for gVisor and this pod runs without it (its node or RuntimeClass gives another runtime)" >&2; exit 94 ;;',
  '  esac',
  'fi',
  // Network none: no route, IPv4 or IPv6, but on loopback (an interface with no route reaches nothing: Kubernetes wants a Pod IP).
  'own=""; case "${SBX_POD_IP:-}" in *.*.*.*) IFS=. read -r a b c d <<EOF',
  '$SBX_POD_IP',
  'EOF',
  '  own="$(printf "%02X%02X%02X%02X" "$d" "$c" "$b" "$a")" ;; esac',
  // Every table, not only main (a route in another table with a rule to it reaches as far): the
  // kernel's own routing dump where the sandbox has one, else /proc (gVisor serves no dump).
  'if all="$("$bb" ip -4 route show table all 2>/dev/null)"; then',
  // Local delivery only: the local table (gVisor lists it without naming it), and loopback's broadcast.
  '  routes="$(echo "$all" | "$bb" grep -v -e "table local" -e "^local " -e "^broadcast .* dev lo " -e "^$")"',
  'else',
  '  [ -r /proc/net/route ] || { echo "the pod has no readable routing table" >&2; exit 92; }',
  '  routes="$("$bb" awk -v own="$own" \'NR > 1 && !($2 == own && $3 == "00000000" && $8 == "FFFFFFFF")\' /proc/net/route)"',
  'fi',
  '[ "$routes" = "" ] || { echo "the pod has IPv4 routes: the node gives pods a network ($routes)" >&2; exit 92; }',
  // IPv6: no address but on loopback (gVisor serves an empty ipv6_route, but a true if_inet6).
  '[ "$("$bb" awk \'$6 != "lo"\' /proc/net/if_inet6 2>/dev/null)" = "" ] || { echo "the pod has IPv6 addresses: the node gives pods a network" >&2; exit 92; }',
  '[ "$("$bb" awk \'$10 != "lo"\' /proc/net/ipv6_route 2>/dev/null)" = "" ] || { echo "the pod has IPv6 routes: the node gives pods a network" >&2; exit 92; }',
  'max="$("$bb" cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || "$bb" cat /sys/fs/cgroup/pids.max 2>/dev/null || echo unknown)"',
  '[ "$max" = unknown ] && max="$declared"',
  'case "$max" in max|-) echo "pids limit: the node sets none (the policy says $pids)" >&2; exit 93 ;; esac',
  '[ "$max" -le "$pids" ] || { echo "pids limit $max is above the policy\'s $pids" >&2; exit 93; }',
  'while [ $# -ge 6 ]; do',
  `  path="$1"; uid="$2"; gid="$3"; mode="$4"; size="$5"; from="$6"; shift 6; dir="${PREPARE_MOUNT}/$i"; i=$((i + 1))`,
  '  if [ "$size" != - ]; then',
  // -P: one line per filesystem, however long its name. 0 KiB is a tmpfs of no size limit (size=0).
  '    kib="$("$bb" df -Pk "$dir" | "$bb" awk \'NR==2 {print $2}\')"',
  '    case "$kib" in ""|*[!0-9]*|0) echo "writable root $path has no size the pod can read ($kib)" >&2; exit 90 ;; esac',
  '    [ "$kib" -le $(( (size + 4095) / 4096 * 4 )) ] || { echo "writable root $path is $kib KiB where the policy says $size bytes" >&2; exit 90; }',
  '  fi',
  '  if [ "$from" != - ] && [ -d "$from" ]; then',
  '    "$bb" cp -a "$from/." "$dir/" || { echo "writable root $path: the image content does not fit" >&2; exit 91; }',
  '    "$bb" chown -R "$seeder" "$dir" || exit 1',
  '    echo "seeded $path"',
  '  fi',
  '  "$bb" chown "$uid:$gid" "$dir" && "$bb" chmod "$mode" "$dir" || exit 1',
  'done',
].join('\n');
