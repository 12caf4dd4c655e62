/**
 * Kubernetes driver (@kubernetes/client-node): a Pod per sandbox in one sandbox namespace,
 * labelled like the Docker driver's containers and found, listed and reaped by those labels. It
 * uses only core/v1 Pods, their logs and watch, the version endpoint and a read of Nodes: the
 * same API from Kubernetes 1.20 (the lab's) to today's. The Pod itself is kubernetes-pod.ts;
 * image configs come from the image's registry (registry-images.ts), and a sandbox runs the
 * image by the digest that was read.
 *
 * What it cannot do answers `runtime.unsupported` naming the feature (pause, memory checkpoints,
 * snapshots, persistent volumes, an image's own `User` looked up in its files);
 * what a policy asks and a node cannot enforce fails the create as `policy.unenforceable`.
 */
import { ApiException, CoreV1Api, KubeConfig, VersionApi, type V1ContainerStatus, type V1Pod } from '@kubernetes/client-node';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import { PodWatch } from './kubernetes-watch.js';
import { PREPARE_CONTAINER, PREPARE_EXIT, SANDBOX_CONTAINER, podName, podOf, type PodOptions } from './kubernetes-pod.js';
import { RegistryImages } from './registry-images.js';
import {
  LABEL,
  ownershipLabels,
  ownershipSelectors,
  type CapturedImage,
  type CheckpointSupport,
  type ImageConfig,
  type OwnedSandbox,
  type Ownership,
  type RuntimeInfo,
  type SandboxRuntime,
  type SandboxSpec,
  type Started,
} from './runtime.js';

/** Waiting-state reasons that mean the image cannot be had. */
const IMAGE_FAILURES = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);
/** Waiting-state reasons that mean a container of the Pod cannot be made at all. */
const CREATE_FAILURES = new Set(['CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);

export interface KubernetesRuntimeOptions extends Omit<PodOptions, 'namespace'> {
  /** A kubeconfig file; null: the Pod's own service account (in-cluster). */
  kubeconfigPath: string | null;
  /** The sandbox namespace. */
  namespace: string;
  /** Registries (`host:port`) read over plain HTTP. */
  plainHttpRegistries: ReadonlySet<string>;
  /** How long a Pod may take from create to its agent's process running, ms. */
  startTimeoutMs: number;
  /** Where the agent's config directory is in a sandbox: its file is given to the Pod as a Secret. */
  agentConfigDir: string;
  log: Pick<Logger, 'warn'>;
}

export class KubernetesRuntime implements SandboxRuntime {
  private readonly core: CoreV1Api;
  private readonly version: VersionApi;
  private readonly pods: PodWatch;
  private readonly registry: RegistryImages;
  /** The nodes' architecture (`kubernetes.io/arch`), read with the nodes; until then this machine's. */
  private nodeArch = process.arch === 'x64' ? 'amd64' : process.arch;

  constructor(private readonly options: KubernetesRuntimeOptions) {
    const kubeConfig = new KubeConfig();
    if (options.kubeconfigPath === null) kubeConfig.loadFromCluster();
    else kubeConfig.loadFromFile(options.kubeconfigPath);
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.version = kubeConfig.makeApiClient(VersionApi);
    this.pods = new PodWatch(kubeConfig, options.namespace, options.log);
    this.registry = new RegistryImages({ plainHttp: options.plainHttpRegistries });
  }

  /** The cluster's version, and the OCI runtimes of its Ready nodes (their `sbx.runtime` label) and of the RuntimeClasses named (SBX_K8S_RUNTIME_CLASSES). */
  async info(): Promise<RuntimeInfo> {
    const [version, nodes] = await Promise.all([
      this.call('version', () => this.version.getCode()),
      this.call('list nodes', () => this.core.listNode({ labelSelector: 'sbx.runtime' })),
    ]);
    const ready = nodes.items.filter((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
    const runtimes = new Set(ready.map((n) => n.metadata?.labels?.['sbx.runtime']).filter((r): r is string => r !== undefined));
    for (const oci of Object.keys(this.options.runtimeClasses)) runtimes.add(oci);
    // The sandbox nodes' architecture, for image indexes (the kubelet's own label); a lease plans after this read.
    this.nodeArch = ready.map((n) => n.metadata?.labels?.['kubernetes.io/arch']).find((a) => a !== undefined) ?? this.nodeArch;
    return { engineVersion: `kubernetes ${version.gitVersion}`, ociRuntimes: [...runtimes] };
  }

  async inspectImage(ref: string): Promise<ImageConfig> {
    return (await this.registry.inspect(ref, this.nodeArch)).config;
  }

  readImageFiles(): Promise<Array<string | null>> {
    return Promise.reject(unsupported("the image's own User looked up in its /etc/passwd (name the tool user in the policy)"));
  }

  async start(spec: SandboxSpec): Promise<Started> {
    // The image by the digest inspectImage read (the plan's pinnedImage): a tag moved since then does not change what runs.
    const name = podName(spec.leaseId);
    const configSecret = { name: `${name}-agent`, mountPath: this.options.agentConfigDir };
    const pod = podOf({ ...spec, image: spec.pinnedImage ?? spec.image }, { ...this.options, configSecret });
    try {
      await this.createConfigSecret(spec, configSecret.name);
      const deadline = Date.now() + this.options.startTimeoutMs;
      let running: V1Pod | AppError;
      for (let attempt = 1; ; attempt++) {
        const created = await this.call('create pod', () =>
          this.core.createNamespacedPod({ namespace: this.options.namespace, body: pod }),
        );
        // The watch may see the Pod after the create returns: absent counts as deleted only once it was seen.
        let seen = false;
        running = await this.pods.until(
          name,
          (p) => {
            seen ||= p !== undefined;
            if (p === undefined && !seen) return undefined;
            return p !== undefined && refusedByNode(p) && attempt < NODE_REFUSALS_RETRIED ? p : startOutcome(p, spec.image);
          },
          Math.max(1, deadline - Date.now()),
        );
        // The node's kubelet refused what the scheduler gave it (its view of the node lagged, e.g.
        // a label just added): the Pod is made again, for the scheduler to place anew, as a
        // ReplicaSet would, after a pause that grows (the kubelet's view catches up). Only
        // refusals before any container; NODE_REFUSALS_RETRIED Pods in all.
        if (running instanceof AppError || !refusedByNode(running)) break;
        this.options.log.warn(
          { leaseId: spec.leaseId, node: running.spec?.nodeName, reason: running.status?.reason, attempt },
          'node refused the sandbox pod; making it again',
        );
        await this.deletePod(name, created.metadata?.uid);
        await delay(Math.min(REFUSAL_PAUSE_MS * attempt, Math.max(0, deadline - Date.now())));
      }
      if (running instanceof AppError) throw running;
      // The agent has read its config (its process runs): the Secret goes, as the host's file does after the hello.
      await this.deleteSecrets([`${LABEL.lease}=${spec.leaseId}`, ...ownershipSelectors(spec.ownership)]);
      return { containerId: running.metadata?.uid ?? name, seededPaths: await this.seededPaths(name) };
    } catch (err) {
      await this.remove(spec.leaseId, spec.ownership).catch(() => undefined);
      if (err instanceof AppError) throw err;
      throw new AppError('lease.create_failed', `Kubernetes could not start the sandbox: ${messageOf(err)}`, { cause: err });
    }
  }

  async exited(leaseId: string, signal?: AbortSignal): Promise<{ exitCode: number | null; logTail: string }> {
    const name = podName(leaseId);
    try {
      const exitCode = await this.pods.until(
        name,
        (p) => {
          if (p === undefined || p.metadata?.deletionTimestamp !== undefined) return { code: null };
          const state = containerStatus(p, SANDBOX_CONTAINER)?.state;
          if (state?.terminated) return { code: state.terminated.exitCode };
          return p.status?.phase === 'Failed' || p.status?.phase === 'Succeeded' ? { code: null } : undefined;
        },
        2 ** 31 - 1,
        signal,
      );
      const logTail = await this.log(name, SANDBOX_CONTAINER, 20).catch(() => this.pods.get(name)?.status?.message ?? '');
      return { exitCode: exitCode.code, logTail: logTail.trim() };
    } catch {
      return { exitCode: null, logTail: '' };
    }
  }

  async remove(leaseId: string, ownership: Ownership): Promise<void> {
    const selector = [`${LABEL.lease}=${leaseId}`, ...ownershipSelectors(ownership)];
    await this.deleteSecrets(selector);
    const pods = await this.list(selector);
    for (const pod of pods) await this.deletePod(pod.metadata?.name ?? '', pod.metadata?.uid);
  }

  /** Deletes Pod `name` (the one of `uid`) at once and waits until it is gone. Throws `runtime.unavailable`. */
  private async deletePod(name: string, uid: string | undefined): Promise<void> {
    await this.call('delete pod', () =>
      this.core.deleteNamespacedPod({ name, namespace: this.options.namespace, gracePeriodSeconds: 0 }).catch((err: unknown) => {
        if (!(err instanceof ApiException && err.code === 404)) throw err;
      }),
    );
    await this.pods
      .until(name, (p) => (p === undefined || p.metadata?.uid !== uid ? true : undefined), 60_000)
      .catch((err) => {
        throw new AppError('runtime.unavailable', `pod ${name} was not gone within a minute: ${messageOf(err)}`, { cause: err });
      });
  }

  async listOwned(ownership: Ownership): Promise<OwnedSandbox[]> {
    const pods = await this.list(ownershipSelectors(ownership));
    return pods.flatMap((pod): OwnedSandbox[] => {
      const leaseId = pod.metadata?.labels?.[LABEL.lease];
      if (leaseId === undefined) return [];
      const alive = pod.metadata?.deletionTimestamp === undefined && (pod.status?.phase === 'Running' || pod.status?.phase === 'Pending');
      return [{ leaseId, containerId: pod.metadata?.uid ?? null, running: alive, paused: false, node: pod.spec?.nodeName ?? null }];
    });
  }

  /** Stops the pod watch (the control plane's shutdown). */
  close(): Promise<void> {
    return this.pods.stop();
  }

  pause = (): Promise<void> => Promise.reject(unsupported('pause'));
  unpause = (): Promise<void> => Promise.reject(unsupported('pause'));
  checkpoint = (): Promise<void> => Promise.reject(unsupported('memory checkpoints'));
  checkpointSupport = (): Promise<CheckpointSupport> =>
    Promise.resolve({ supported: false, missing: ['the Kubernetes driver has no memory checkpoints'] });
  snapshot = (): Promise<CapturedImage> => Promise.reject(unsupported('snapshots'));
  snapshotBytesEstimate = (): Promise<number> => Promise.reject(unsupported('snapshots'));
  removeSnapshot = (): Promise<void> => Promise.reject(unsupported('snapshots'));
  /** Nothing is recorded of images: each pod's node reads its image itself. */
  sweepImageSurvey = (): Promise<number> => Promise.resolve(0);

  private async list(selector: string[]): Promise<V1Pod[]> {
    const list = await this.call('list pods', () =>
      this.core.listNamespacedPod({ namespace: this.options.namespace, labelSelector: selector.join(',') }),
    );
    return list.items;
  }

  /** The agent's config file, from its host directory, as the Secret `name` (labelled like the Pod). */
  private async createConfigSecret(spec: SandboxSpec, name: string): Promise<void> {
    const dir = spec.readOnlyBinds.find((b) => b.containerPath === this.options.agentConfigDir);
    if (dir === undefined) throw new Error('the sandbox spec mounts no agent config directory');
    const files = await readdir(dir.hostPath);
    const data = Object.fromEntries(
      await Promise.all(files.map(async (f) => [f, (await readFile(join(dir.hostPath, f))).toString('base64')])),
    );
    const labels = { [LABEL.lease]: spec.leaseId, ...ownershipLabels(spec.ownership) };
    await this.call('create secret', () =>
      this.core.createNamespacedSecret({ namespace: this.options.namespace, body: { metadata: { name, labels }, type: 'Opaque', data } }),
    );
  }

  private async deleteSecrets(selector: string[]): Promise<void> {
    await this.call('delete secrets', () =>
      this.core.deleteCollectionNamespacedSecret({ namespace: this.options.namespace, labelSelector: selector.join(',') }),
    );
  }

  /** Writable roots the prepare step filled from the image: its `seeded <path>` lines. */
  private async seededPaths(name: string): Promise<string[]> {
    const log = await this.log(name, PREPARE_CONTAINER);
    return log
      .split('\n')
      .filter((line) => line.startsWith('seeded '))
      .map((line) => line.slice('seeded '.length));
  }

  private log(name: string, container: string, tailLines?: number): Promise<string> {
    return this.call('read pod log', () =>
      this.core.readNamespacedPodLog({ name, namespace: this.options.namespace, container, ...(tailLines ? { tailLines } : {}) }),
    );
  }

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof AppError) throw err;
      throw new AppError('runtime.unavailable', `Kubernetes ${what} failed: ${messageOf(err)}`, { cause: err });
    }
  }
}

/** How many Pods in all a lease's start makes when nodes refuse them before they start (refusedByNode). */
const NODE_REFUSALS_RETRIED = 3;
/** The pause before the next Pod after a node's refusal, times the attempt number, ms. */
const REFUSAL_PAUSE_MS = 1000;

/**
 * Whether the Pod's node refused it before starting any container: the kubelet's admission
 * (its own check of node affinity, resources, pods per node) failed the Pod the scheduler had
 * placed, with no container status (kubelet `rejectPod`).
 */
export function refusedByNode(pod: V1Pod): boolean {
  const status = pod.status;
  return (
    status?.phase === 'Failed' &&
    pod.spec?.nodeName !== undefined &&
    (status.initContainerStatuses ?? []).length === 0 &&
    (status.containerStatuses ?? []).length === 0
  );
}

/**
 * What a Pod being started has come to: the Pod once its sandbox container runs; an AppError
 * once it cannot (the prepare step refused, the image cannot be had, no node can take it);
 * undefined while it is on its way.
 */
export function startOutcome(pod: V1Pod | undefined, image: string): V1Pod | AppError | undefined {
  if (pod === undefined || pod.metadata?.deletionTimestamp !== undefined)
    return new AppError('lease.create_failed', 'the sandbox pod was deleted while it started');
  const prepared = containerStatus(pod, PREPARE_CONTAINER, true)?.state?.terminated;
  if (prepared && prepared.exitCode !== 0) return prepareFailure(prepared.exitCode, prepared.message ?? '');
  // After the prepare step's own answer: it fails the Pod too.
  if (pod.status?.phase === 'Failed')
    return new AppError(
      'lease.create_failed',
      `the sandbox pod failed as it started: ${pod.status.reason ?? ''} ${pod.status.message ?? ''}`.trim(),
    );
  for (const status of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
    const reason = status.state?.waiting?.reason;
    if (reason !== undefined && CREATE_FAILURES.has(reason))
      return new AppError('lease.create_failed', `the sandbox's container cannot be made: ${status.state?.waiting?.message ?? reason}`);
    if (reason !== undefined && IMAGE_FAILURES.has(reason))
      return new AppError(
        'image.not_found',
        `the cluster's nodes cannot pull image ${image}: ${status.state?.waiting?.message ?? reason}`,
        {
          details: { image },
        },
      );
  }
  const unschedulable = pod.status?.conditions?.find(
    (c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable',
  );
  if (unschedulable)
    return new AppError('capacity.exhausted', `no node of the cluster can take the sandbox now: ${unschedulable.message ?? ''}`, {
      details: { reason: unschedulable.message ?? 'Unschedulable' },
    });
  const sandbox = containerStatus(pod, SANDBOX_CONTAINER)?.state;
  if (sandbox?.terminated)
    return new AppError('lease.create_failed', `the sandbox's agent exited with ${sandbox.terminated.exitCode} as it started`);
  return sandbox?.running ? pod : undefined;
}

function prepareFailure(exitCode: number, message: string): AppError {
  const said = message.trim();
  switch (exitCode) {
    case PREPARE_EXIT.sizeUnenforced:
    case PREPARE_EXIT.networkOpen:
    case PREPARE_EXIT.pidsUnenforced:
    case PREPARE_EXIT.runtimeUnenforced:
      return new AppError('policy.unenforceable', `the node cannot enforce the policy: ${said}`, {
        details: { runtime: 'kubernetes', reason: said },
      });
    case PREPARE_EXIT.rootFull:
      return new AppError('lease.writable_root_full', said, { details: { reason: said } });
    default:
      return new AppError('lease.create_failed', `preparing the sandbox's writable roots failed (exit ${exitCode}): ${said}`);
  }
}

function containerStatus(pod: V1Pod, name: string, init = false): V1ContainerStatus | undefined {
  return (init ? pod.status?.initContainerStatuses : pod.status?.containerStatuses)?.find((s) => s.name === name);
}

function unsupported(feature: string): AppError {
  return new AppError('runtime.unsupported', `the Kubernetes driver has no ${feature}`, { details: { feature, runtime: 'kubernetes' } });
}

function messageOf(err: unknown): string {
  if (err instanceof ApiException) {
    const body = typeof err.body === 'string' ? err.body : JSON.stringify(err.body);
    return `${err.code} ${body.slice(0, 300)}`;
  }
  return err instanceof Error ? err.message : String(err);
}
