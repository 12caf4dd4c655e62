/**
 * deploy/kubernetes/kubernetes-driver/'s control plane, Redis and node relay as the lab can run
 * them. The lab has no Pod network, cluster DNS, kube-proxy, volume provisioner, and no image but
 * those it builds (no control-plane image: building it pulls `node:20-bookworm-slim`). So, and
 * only so, the manifests are changed:
 * - every Pod uses its node's network (host network) and is placed by node: Redis on one runc
 *   node, the replicas and relays on the runc nodes (the lab's gVisor node runs every container
 *   under runsc, whose Unix sockets its host does not see);
 * - the Services' names become addresses: Redis's node, and the hub's link front for `sbx-link`
 *   (which passes each connection to a listening replica, as the Service would);
 * - Redis runs the lab's image of Debian's redis-server (test/lab/redis-image.sh), the control
 *   plane and relay the checkout's build (`dist/`) on the sandbox image, which has node; the
 *   agent runtime's image is the checkout's runtime (images/runtime/image.sh);
 * - the artifact volume and Redis's data are host directories (Redis's owned by the user the
 *   manifest runs it as: a host path gets no `fsGroup`); the node directories of the relay and
 *   the agent runtime are under the lab's directory of each node's own;
 * - the control plane's command names the build's entry point, where the image's CMD would.
 * Everything else — the relay's and Redis's commands, settings, Secrets, probes, security
 * contexts, mounts, RBAC — is the manifests'.
 */
import { chown, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../fixtures/index.js';
import type { KubernetesLab } from '../fixtures/kubernetes.js';

/** What the lab gives a deployment, and who it is. */
export interface LabDeploymentInput {
  lab: KubernetesLab;
  /** The runc node Redis runs on, and its address (the certificate of the lab's TLS names it). */
  redisNode: { name: string; address: string };
  /** The deployed control plane's owner and Redis key prefix. */
  identity: { owner: string; prefix: string };
  /** Host directories: the replicas' shared artifacts, Redis's data. */
  artifactDir: string;
  redisDataDir: string;
}

type Doc = any;
type EnvVar = { name: string; value?: string };

const DRIVER_DIR = join(REPO_ROOT, 'deploy/kubernetes/kubernetes-driver');
const RUNC_NODES = { 'sbx.runtime': 'runc' };

/** The relay's node directory in the lab (k8s-lab.sh: a directory of each node's own). */
export function deployedRelayDir(): string {
  return join(process.env.SBX_LAB_NODE_DIR!, 'relay-deployed');
}

/** Where the relay's installer puts the agent runtime on each node in the lab (node-relay.yaml: /var/lib/sbx-runtime). */
export function deployedRuntimeRoot(): string {
  return join(process.env.SBX_LAB_NODE_DIR!, 'runtime');
}

async function manifest(file: string): Promise<Doc[]> {
  return parseAllDocuments(await readFile(join(DRIVER_DIR, file), 'utf8')).map((d) => d.toJS() as Doc);
}

function setEnv(container: Doc, overrides: Record<string, string>): void {
  container.env = [
    ...(container.env as EnvVar[]).filter((e) => !(e.name in overrides)),
    ...Object.entries(overrides).map(([name, value]) => ({ name, value })),
  ];
}

/** Runs `container` from the checkout's build on the sandbox image (the lab has no control-plane image). */
function onCheckout(pod: Doc, container: Doc, image: string): void {
  container.image = image;
  container.workingDir = REPO_ROOT;
  container.volumeMounts.push({ name: 'checkout', mountPath: REPO_ROOT, readOnly: true });
  pod.volumes.push({ name: 'checkout', hostPath: { path: REPO_ROOT, type: 'Directory' } });
}

function replaceVolume(pod: Doc, name: string, volume: Doc): void {
  pod.volumes = [...pod.volumes.filter((v: Doc) => v.name !== name), { name, ...volume }];
}

/** control-plane.yaml, redis.yaml and node-relay.yaml with the lab's substitutions (above), in the order to apply them. */
export async function labDeployment(input: LabDeploymentInput): Promise<Doc[]> {
  const { lab, redisNode, identity } = input;
  const hub = lab.registry.split(':')[0]!;
  const redisAddress = `${redisNode.address}:6380`;

  const redis = await manifest('redis.yaml');
  const set = redis.find((d) => d.kind === 'StatefulSet');
  const redisPod = set.spec.template.spec;
  redisPod.hostNetwork = true;
  redisPod.nodeSelector = { 'kubernetes.io/hostname': redisNode.name };
  redisPod.containers[0].image = process.env.SBX_LAB_REDIS_IMAGE;
  delete set.spec.volumeClaimTemplates;
  redisPod.volumes.push({ name: 'data', hostPath: { path: input.redisDataDir, type: 'Directory' } });
  await chown(input.redisDataDir, redisPod.securityContext.runAsUser, redisPod.securityContext.runAsGroup);

  const relays = await manifest('node-relay.yaml');
  const relayPod = relays.find((d) => d.kind === 'DaemonSet').spec.template.spec;
  const relay = relayPod.containers[0];
  relayPod.hostNetwork = true;
  relayPod.nodeSelector = RUNC_NODES;
  relay.command = (relay.command as string[]).map((arg) =>
    arg.replace('sbx-redis.sbx-system.svc:6380', redisAddress).replace('sbx-link.sbx-system.svc:7071', `${hub}:7071`),
  );
  onCheckout(relayPod, relay, lab.image);
  replaceVolume(relayPod, 'relay', { hostPath: { path: deployedRelayDir(), type: 'DirectoryOrCreate' } });
  const installer = relayPod.initContainers[0];
  installer.image = process.env.SBX_LAB_RUNTIME_IMAGE;
  replaceVolume(relayPod, 'runtime', { hostPath: { path: deployedRuntimeRoot(), type: 'DirectoryOrCreate' } });
  const runtimeDir = join(deployedRuntimeRoot(), (installer.env as EnvVar[]).find((e) => e.name === 'RUNTIME_VERSION')!.value!);

  const plane = await manifest('control-plane.yaml');
  const deployment = plane.find((d) => d.kind === 'Deployment');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  setEnv(container, {
    KUBERNETES_SERVICE_HOST: hub,
    KUBERNETES_SERVICE_PORT: '6443',
    SBX_REDIS_URL: `rediss://${redisAddress}`,
    SBX_REDIS_PREFIX: identity.prefix,
    SBX_OWNER: identity.owner,
    SBX_IMAGE: lab.image,
    SBX_K8S_PLAIN_HTTP_REGISTRIES: lab.registry,
    SBX_K8S_NODE_PIDS_LIMIT: '512',
    SBX_AGENT_RELAY_DIR: deployedRelayDir(),
    SBX_AGENT_RUNTIME: runtimeDir,
    SBX_LOG_LEVEL: 'warn',
    // The link Service's name in the manifest; here the front's address, which the lab's certificate carries.
    SBX_LINK_TLS_PEER_NAME: hub,
  });
  container.command = ['node', 'dist/control-plane/main.js'];
  onCheckout(pod, container, lab.image);
  container.volumeMounts = [
    ...container.volumeMounts.filter((m: Doc) => m.name !== 'runtime'),
    { name: 'runtime', mountPath: runtimeDir, readOnly: true },
  ];
  pod.hostNetwork = true;
  pod.nodeSelector = RUNC_NODES;
  replaceVolume(pod, 'artifacts', { hostPath: { path: input.artifactDir, type: 'Directory' } });
  replaceVolume(pod, 'runtime', { hostPath: { path: runtimeDir, type: 'Directory' } });
  return [...redis, ...relays, ...plane.filter((d) => d.kind !== 'PersistentVolumeClaim')];
}
