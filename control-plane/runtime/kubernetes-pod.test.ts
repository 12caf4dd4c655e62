import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { AGENT_RUNTIME_DIR } from '../../contract/agent-runtime.js';
import { AppError } from '../../contract/errors.js';
import { compileSandboxSpec } from '../policies/compiler.js';
import { Policy, policyRef } from '../policies/schema.js';
import {
  LABELS_ANNOTATION,
  PREPARE_CONTAINER,
  PREPARE_EXIT,
  SANDBOX_CONTAINER,
  podName,
  podOf,
  type PodOptions,
} from './kubernetes-pod.js';
import { refusedByNode, startOutcome } from './kubernetes-runtime.js';
import { parseRegistryRef } from './registry-images.js';
import type { SandboxSpec } from './runtime.js';

const policy = Policy.parse({
  name: 'p',
  version: 3,
  filesystem: {
    writableRoots: [
      { path: '/workspace', sizeBytes: 256 * 1024 ** 2, kind: 'volume', fromImage: true },
      { path: '/tmp', sizeBytes: 64 * 1024 ** 2 },
    ],
  },
  network: { mode: 'none' },
  resources: { cpus: 1.5, memoryBytes: 512 * 1024 ** 2, pids: 128, openFiles: 1024, ttlSeconds: 60, maxTtlSeconds: 600 },
  runtime: { toolUser: { name: 'sandbox', uid: 1000, gid: 1000, home: '/workspace' } },
  tools: { exec: { defaultTimeoutMs: 1000, maxTimeoutMs: 2000, maxOutputBytes: 4096 } },
});

function specOf(p: Policy = policy, owner = 'team-ci'): SandboxSpec {
  return compileSandboxSpec({
    leaseId: 'sbx_00ab12CD',
    ownership: { owner, installation: 'inst_1' },
    sbxVersion: '0.1.0',
    image: 'registry.example:5000/sbx-sandbox:1',
    policy: p,
    policyRef: policyRef(p),
    agentConfigHostDir: '/data/leases/sbx_00ab12CD',
    agentRuntimeDir: '/data/runtime/abc',
    toolUser: p.runtime.toolUser!,
    agentRedisSocketDir: '/data/redis-socket',
    egressSocketHostDir: '/data/egress/sbx_00ab12CD',
    mounts: { allowlist: [], realpaths: new Map(), protectedPaths: [] },
    ociRuntimes: ['runc', 'runsc'],
    labels: { team: 'a', 'odd key/with slash': 'x' },
  });
}

const options: PodOptions = {
  namespace: 'sbx-sandboxes',
  imagePullPolicy: 'IfNotPresent',
  nodeSelector: { 'sbx.network': 'none' },
  runtimeClasses: {},
  nodeLostAfterSeconds: 10,
  cpuRequestFraction: 0.25,
  nodePidsLimit: null,
};

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    return (err as AppError).code;
  }
  throw new Error('expected an AppError');
}

describe('a sandbox as a Kubernetes Pod', () => {
  it('isolates as the policy says: no service account token or service links, caps dropped but the agent minimum, no escalation, read-only root, seccomp, limits', () => {
    const pod = podOf(specOf(), options);
    const sandbox = pod.spec!.containers[0]!;
    expect(pod.metadata!.name).toBe('sbx-sbx-00ab12cd');
    expect(pod.metadata!.name).toBe(podName('sbx_00ab12CD'));
    expect(pod.spec).toMatchObject({
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
      nodeSelector: { 'sbx.network': 'none', 'sbx.runtime': 'runc' },
    });
    expect(pod.spec!.tolerations).toEqual([
      { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 10 },
      { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 10 },
    ]);
    expect(sandbox.name).toBe(SANDBOX_CONTAINER);
    expect(sandbox.securityContext).toEqual({
      runAsUser: 0,
      runAsGroup: 0,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'], add: ['SETUID', 'SETGID', 'KILL'] },
    });
    // The scheduler reserves a quarter of the CPU limit (CPU is shared when idle) and the whole memory.
    expect(sandbox.resources).toEqual({
      limits: { cpu: '1500m', memory: String(512 * 1024 ** 2) },
      requests: { cpu: '375m', memory: String(512 * 1024 ** 2) },
    });
    // Open files: the agent starts under ulimit -n, since no Pod field says it.
    expect(sandbox.command!.slice(2, 5)).toEqual(['-c', 'ulimit -n "$0" && exec "$@"', '1024']);
    expect(sandbox.command!.slice(5)).toEqual(specOf().command);
  });

  it('labels it by lease, owner and installation, and keeps every label (one Kubernetes cannot hold too) in an annotation', () => {
    const pod = podOf(specOf(), options);
    expect(pod.metadata!.labels).toMatchObject({
      'sbx.lease': 'sbx_00ab12CD',
      'sbx.owner': 'team-ci',
      'sbx.installation': 'inst_1',
    });
    // A tenant's label could put the sandbox under a Service's or a NetworkPolicy's selector: annotation only.
    expect(pod.metadata!.labels!.team).toBeUndefined();
    expect(pod.metadata!.labels!['sbx.policy']).toBeUndefined(); // `p@3`: `@` is no label character
    expect(pod.metadata!.labels!['odd key/with slash']).toBeUndefined();
    expect(JSON.parse(pod.metadata!.annotations![LABELS_ANNOTATION]!)).toMatchObject({
      'sbx.policy': 'p@3',
      team: 'a',
      'odd key/with slash': 'x',
    });
    expect(codeOf(() => podOf(specOf(policy, 'an owner with spaces'), options))).toBe('policy.unenforceable');
  });

  it('gives each writable root a sized memory emptyDir, the spool a disk one, the host directories read-only hostPaths', () => {
    const pod = podOf(specOf(), options);
    const volumes = Object.fromEntries(pod.spec!.volumes!.map((v) => [v.name, v]));
    const mounts = Object.fromEntries(pod.spec!.containers[0]!.volumeMounts!.map((m) => [m.mountPath, m]));
    expect(volumes[mounts['/workspace']!.name]!.emptyDir).toEqual({ medium: 'Memory', sizeLimit: String(256 * 1024 ** 2) });
    expect(volumes[mounts['/tmp']!.name]!.emptyDir).toEqual({ medium: 'Memory', sizeLimit: String(64 * 1024 ** 2) });
    expect(volumes[mounts['/run/sbx/spool']!.name]!.emptyDir).toEqual({});
    expect(mounts[AGENT_RUNTIME_DIR]).toMatchObject({ readOnly: true });
    expect(volumes[mounts[AGENT_RUNTIME_DIR]!.name]!.hostPath).toEqual({ path: '/data/runtime/abc', type: 'Directory' });
    expect(volumes[mounts['/run/sbx/redis']!.name]!.hostPath).toEqual({ path: '/data/redis-socket', type: 'Directory' });
  });

  it('prepares the roots first: the init container has only CHOWN, FOWNER and DAC_OVERRIDE, and is told each root, its owner, size and content', () => {
    const pod = podOf(specOf(), options);
    const prepare = pod.spec!.initContainers![0]!;
    expect(prepare.name).toBe(PREPARE_CONTAINER);
    expect(prepare.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'], add: ['CHOWN', 'FOWNER', 'DAC_OVERRIDE'] },
    });
    const args = prepare.command!.slice(3);
    expect(args[1]).toBe('128:-'); // the pids limit it checks the node against; none declared for nodes
    expect(args[2]).toBe('1000:1000'); // who owns what is copied from the image
    expect(args[3]).toBe('runc'); // the runtime it checks the kernel against (gVisor for runsc)
    // Each root starts with the image's content there (fromImage); /tmp stays root's and sticky.
    expect(args.slice(4, 10)).toEqual(['/workspace', '1000', '1000', '0755', String(256 * 1024 ** 2), '/workspace']);
    expect(args).toContain('/tmp');
    expect(args.slice(args.indexOf('/tmp'), args.indexOf('/tmp') + 6)).toEqual(['/tmp', '0', '0', '1777', String(64 * 1024 ** 2), '/tmp']);
  });

  it('runs gVisor policies on gVisor nodes', () => {
    const gvisor = Policy.parse({ ...policy, runtime: { ...policy.runtime, oci: 'runsc' } });
    expect(podOf(specOf(gvisor), options).spec!.nodeSelector).toEqual({ 'sbx.network': 'none', 'sbx.runtime': 'runsc' });
    expect(podOf(specOf(gvisor), options).spec!.runtimeClassName).toBeUndefined();
    // A RuntimeClass named for the runtime places it instead of the node label; other runtimes keep theirs.
    const withClass = { ...options, runtimeClasses: { runsc: 'gvisor' } };
    expect(podOf(specOf(gvisor), withClass).spec).toMatchObject({ runtimeClassName: 'gvisor', nodeSelector: { 'sbx.network': 'none' } });
    expect(podOf(specOf(gvisor), withClass).spec!.nodeSelector!['sbx.runtime']).toBeUndefined();
    expect(podOf(specOf(), withClass).spec).toMatchObject({ nodeSelector: { 'sbx.runtime': 'runc' } });
    expect(podOf(specOf(), withClass).spec!.runtimeClassName).toBeUndefined();
  });

  it("places by the policy's node labels besides the runtime's; the policy cannot name sbx.runtime, nor bad keys or values", () => {
    const zoned = Policy.parse({ ...policy, runtime: { ...policy.runtime, nodeLabels: { 'topology.kubernetes.io/zone': 'b', gpu: '' } } });
    expect(podOf(specOf(zoned), options).spec!.nodeSelector).toEqual({
      'sbx.network': 'none',
      'topology.kubernetes.io/zone': 'b',
      gpu: '',
      'sbx.runtime': 'runc',
    });
    // The admin's selector is not the policy's to move: the same value narrows nothing, another is refused.
    const same = Policy.parse({ ...policy, runtime: { ...policy.runtime, nodeLabels: { 'sbx.network': 'none' } } });
    expect(podOf(specOf(same), options).spec!.nodeSelector).toEqual({ 'sbx.network': 'none', 'sbx.runtime': 'runc' });
    const moved = Policy.parse({ ...policy, runtime: { ...policy.runtime, nodeLabels: { 'sbx.network': 'open' } } });
    expect(codeOf(() => podOf(specOf(moved), options))).toBe('policy.unenforceable');
    for (const nodeLabels of [{ 'sbx.runtime': 'runsc' }, { 'Bad Key': 'x' }, { zone: 'not a value' }, { zone: 'x'.repeat(64) }])
      expect(Policy.safeParse({ ...policy, runtime: { ...policy.runtime, nodeLabels } }).success, JSON.stringify(nodeLabels)).toBe(false);
  });

  it('refuses what it cannot give: a network of its own (policy.unenforceable), persistent volumes (runtime.unsupported)', () => {
    const open = Policy.parse({ ...policy, network: { mode: 'open' } });
    expect(codeOf(() => podOf(specOf(open), options))).toBe('policy.unenforceable');
    const withVolume = { ...specOf(), volumeBinds: [{ hostPath: '/v', containerPath: '/data', readOnly: false }] };
    expect(codeOf(() => podOf(withVolume, options))).toBe('runtime.unsupported');
  });
});

describe('a starting Pod, read from its status', () => {
  const image = 'r:5000/i:1';
  const pod = (status: V1Pod['status']): V1Pod => ({ metadata: { name: 'x' }, status });
  const outcome = (status: V1Pod['status']): string => {
    const result = startOutcome(pod(status), image);
    return result instanceof AppError ? result.code : result === undefined ? 'waiting' : 'running';
  };
  const terminated = (exitCode: number) => ({
    name: PREPARE_CONTAINER,
    ready: false,
    restartCount: 0,
    image,
    imageID: '',
    state: { terminated: { exitCode, message: 'said' } },
  });

  it('waits, then runs once the sandbox container runs', () => {
    expect(outcome({ phase: 'Pending' })).toBe('waiting');
    expect(
      outcome({
        containerStatuses: [{ name: SANDBOX_CONTAINER, ready: true, restartCount: 0, image, imageID: '', state: { running: {} } }],
      }),
    ).toBe('running');
  });

  it('maps a refusal of the prepare step to its error', () => {
    expect(outcome({ initContainerStatuses: [terminated(PREPARE_EXIT.sizeUnenforced)] })).toBe('policy.unenforceable');
    expect(outcome({ initContainerStatuses: [terminated(PREPARE_EXIT.networkOpen)] })).toBe('policy.unenforceable');
    expect(outcome({ initContainerStatuses: [terminated(PREPARE_EXIT.pidsUnenforced)] })).toBe('policy.unenforceable');
    expect(outcome({ initContainerStatuses: [terminated(PREPARE_EXIT.runtimeUnenforced)] })).toBe('policy.unenforceable');
    expect(outcome({ initContainerStatuses: [terminated(PREPARE_EXIT.rootFull)] })).toBe('lease.writable_root_full');
    expect(outcome({ initContainerStatuses: [terminated(1)] })).toBe('lease.create_failed');
    expect(outcome({ initContainerStatuses: [terminated(0)] })).toBe('waiting');
  });

  it("answers a Pod failed or stuck as it starts at once, not after the start timeout; the prepare step's own answer first", () => {
    expect(outcome({ phase: 'Failed', reason: 'OutOfmemory' })).toBe('lease.create_failed');
    expect(outcome({ phase: 'Failed', initContainerStatuses: [terminated(PREPARE_EXIT.networkOpen)] })).toBe('policy.unenforceable');
    const stuck = {
      name: SANDBOX_CONTAINER,
      ready: false,
      restartCount: 0,
      image,
      imageID: '',
      state: { waiting: { reason: 'CreateContainerConfigError' } },
    };
    expect(outcome({ phase: 'Pending', containerStatuses: [stuck] })).toBe('lease.create_failed');
  });

  it('answers an image no node can pull, a cluster with no room, a deleted Pod', () => {
    const waiting = {
      name: PREPARE_CONTAINER,
      ready: false,
      restartCount: 0,
      image,
      imageID: '',
      state: { waiting: { reason: 'ErrImagePull', message: 'not found' } },
    };
    expect(outcome({ initContainerStatuses: [waiting] })).toBe('image.not_found');
    expect(
      outcome({ conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/3 nodes are available' }] }),
    ).toBe('capacity.exhausted');
    expect((startOutcome(undefined, image) as AppError).code).toBe('lease.create_failed');
  });

  it("tells a node's refusal before any container (made again) from a Pod that failed once started", () => {
    // As kubelet's rejectPod leaves it: the node's own affinity check ran on a label it had not seen yet.
    const refused: V1Pod = {
      metadata: { name: 'x' },
      spec: { nodeName: 'n2', containers: [] },
      status: { phase: 'Failed', reason: 'NodeAffinity', message: 'Pod Predicate NodeAffinity failed' },
    };
    expect(refusedByNode(refused)).toBe(true);
    const running = { name: SANDBOX_CONTAINER, ready: false, restartCount: 0, image, imageID: '', state: { terminated: { exitCode: 1 } } };
    expect(refusedByNode({ ...refused, status: { ...refused.status, containerStatuses: [running] } })).toBe(false);
    expect(refusedByNode({ ...refused, spec: { containers: [] } })).toBe(false);
    expect(refusedByNode({ ...refused, status: { phase: 'Pending' } })).toBe(false);
  });
});

describe('registry references', () => {
  it('splits registry, repository and tag or digest, and refuses a reference without a registry', () => {
    expect(parseRegistryRef('10.0.0.1:5000/sbx/sandbox:abc')).toEqual({
      registry: '10.0.0.1:5000',
      repository: 'sbx/sandbox',
      reference: 'abc',
    });
    expect(parseRegistryRef('reg.example/img')).toEqual({ registry: 'reg.example', repository: 'img', reference: 'latest' });
    expect(parseRegistryRef('localhost/i@sha256:00')).toEqual({ registry: 'localhost', repository: 'i', reference: 'sha256:00' });
    expect(parseRegistryRef('r.example:5000/app:v1@sha256:00')).toEqual({
      registry: 'r.example:5000',
      repository: 'app',
      reference: 'sha256:00',
    });
    expect(codeOf(() => parseRegistryRef('ubuntu:22.04'))).toBe('image.invalid_reference');
    expect(codeOf(() => parseRegistryRef('library/ubuntu'))).toBe('image.invalid_reference');
  });
});
