/**
 * deploy/kubernetes/kubernetes-driver/ applied to the lab with kubectl, as an admin would: the
 * sandbox namespace, the deny-all NetworkPolicy and the RBAC of the control plane's
 * ServiceAccount (`sbx-system/sbx-control-plane`). A control plane authenticated by that account's
 * token alone then does the driver's whole job in `sbx-sandboxes` — a lease, a call, files, a
 * restart that adopts the lease, a warm pool, release — and the account may do nothing else.
 * Then `control-plane.yaml` itself: two replicas as Pods of the cluster, leasing through the one
 * address, with the lab's substitutions (`labDeployment`) for what the lab lacks.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import { loadConfig } from '../../control-plane/config.js';
import { SbxClient } from '../../sdk/index.js';
import { eventually, execIn, planeIdentity, REPO_ROOT, tarBytes, useHarness, useScratchDirs } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('deploy');
const scratch = useScratchDirs();
const MANIFESTS = ['namespace.yaml', 'networkpolicy.yaml', 'rbac.yaml'].map((f) =>
  join(REPO_ROOT, 'deploy/kubernetes/kubernetes-driver', f),
);
let accountKubeconfig = '';

/** kubectl with `kubeconfig`: the admin's (`lab.kubeconfig`) or the ServiceAccount's. */
function kubectl(kubeconfig: string, ...args: string[]): Promise<string> {
  return lab.kubectl(args, kubeconfig);
}

beforeAll(async () => {
  await kubectl(lab.kubeconfig, 'create', 'namespace', 'sbx-system');
  await kubectl(lab.kubeconfig, '-n', 'sbx-system', 'create', 'serviceaccount', 'sbx-control-plane');
  await kubectl(lab.kubeconfig, 'apply', ...MANIFESTS.flatMap((f) => ['-f', f]));
  // The token controller gives the account a token Secret (Kubernetes 1.20; from 1.24 `kubectl create token`).
  const secret = await eventually(
    () => kubectl(lab.kubeconfig, '-n', 'sbx-system', 'get', 'serviceaccount', 'sbx-control-plane', '-o', 'jsonpath={.secrets[0].name}'),
    (name) => name !== '',
  );
  const token = Buffer.from(
    await kubectl(lab.kubeconfig, '-n', 'sbx-system', 'get', 'secret', secret, '-o', 'jsonpath={.data.token}'),
    'base64',
  ).toString();
  const server = await kubectl(lab.kubeconfig, 'config', 'view', '-o', 'jsonpath={.clusters[0].cluster.server}');
  accountKubeconfig = join(await scratch('deploy-'), 'kubeconfig');
  await writeFile(
    accountKubeconfig,
    `apiVersion: v1\nkind: Config\nclusters: [{name: lab, cluster: {server: "${server}", insecure-skip-tls-verify: true}}]\n` +
      `users: [{name: sbx, user: {token: "${token}"}}]\ncontexts: [{name: sbx, context: {cluster: lab, user: sbx}}]\ncurrent-context: sbx\n`,
  );
}, 120_000);

afterAll(async () => {
  await kubectl(lab.kubeconfig, 'delete', '--wait=false', ...MANIFESTS.flatMap((f) => ['-f', f])).catch(() => undefined);
  await kubectl(lab.kubeconfig, 'delete', 'namespace', 'sbx-system', '--wait=false').catch(() => undefined);
});

const h = useHarness(() => ({
  ...lab.settings(),
  SBX_K8S_KUBECONFIG: accountKubeconfig,
  SBX_K8S_NAMESPACE: 'sbx-sandboxes',
  SBX_WARM_POOLS: JSON.stringify([{ policy: 'default', min: 1, max: 1 }]),
}));
const exec = execIn(() => h.client);

describe('the driver deployed with its least-privilege RBAC', () => {
  it("leases, runs, moves files, adopts after a restart, pools and releases with the ServiceAccount's token alone", async () => {
    const readyKey = `${h.config.redisPrefix}pool:default@${h.config.image}:ready`;
    await eventually(
      () => h.redis.llen(readyKey),
      (n) => n === 1,
      120_000,
      250,
    );
    const pooled = await h.client.createSandbox();
    const cold = await h.client.createSandbox({ labels: { cold: 'yes' } });
    expect((await exec(pooled.id, 'echo pooled')).stdout).toBe('pooled\n');
    await h.client.uploadTar(cold.id, '/workspace', await tarBytes([{ name: 'deployed.txt', content: 'through the relay' }]));
    expect((await exec(cold.id, 'cat /workspace/deployed.txt')).stdout).toBe('through the relay');
    await h.restart();
    expect((await h.client.getSandbox(cold.id)).status).toBe('ready');
    expect((await exec(cold.id, 'echo adopted')).stdout).toBe('adopted\n');
    for (const lease of [pooled, cold]) await h.client.releaseSandbox(lease.id);
    expect((await kubectl(lab.kubeconfig, '-n', 'sbx-sandboxes', 'get', 'pods', '-l', `sbx.lease=${cold.id}`, '-o', 'name')).trim()).toBe(
      '',
    );
  });

  it('the account can do nothing beyond what the driver calls', async () => {
    const can = async (...args: string[]): Promise<string> =>
      (await kubectl(accountKubeconfig, 'auth', 'can-i', ...args).catch((err: { stdout?: string }) => err.stdout ?? '')).trim();
    for (const allowed of [
      ['create', 'pods', '-n', 'sbx-sandboxes'],
      ['watch', 'pods', '-n', 'sbx-sandboxes'],
      ['get', 'pods', '--subresource=log', '-n', 'sbx-sandboxes'],
      ['create', 'secrets', '-n', 'sbx-sandboxes'],
      ['list', 'nodes'],
    ])
      expect(await can(...allowed), allowed.join(' ')).toBe('yes');
    for (const refused of [
      ['get', 'secrets', '-n', 'sbx-sandboxes'],
      ['create', 'pods', '--subresource=exec', '-n', 'sbx-sandboxes'],
      ['create', 'pods', '-n', 'sbx-system'],
      ['list', 'pods', '-n', 'kube-system'],
      ['delete', 'nodes'],
      ['create', 'networkpolicies', '-n', 'sbx-sandboxes'],
    ])
      expect(await can(...refused), refused.join(' ')).toBe('no');
  });
});

/**
 * `control-plane.yaml` as the lab can run it. The lab has no Pod network, cluster DNS, kube-proxy,
 * volume provisioner or control-plane image: the replicas run on their nodes' network (host
 * network, on the runc nodes), reach the API server, Redis (TLS, set-up's, through the hub) and
 * the registry by address, keep artifacts in a host directory, and run the checkout's build on
 * the sandbox image (which has node). Everything else is the manifest's.
 */
async function labDeployment(identity: ReturnType<typeof planeIdentity>, artifactDir: string): Promise<unknown[]> {
  const file = join(REPO_ROOT, 'deploy/kubernetes/kubernetes-driver/control-plane.yaml');
  const docs = parseAllDocuments(await readFile(file, 'utf8')).map((d) => d.toJS() as any);
  const deployment = docs.find((d) => d.kind === 'Deployment');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  const hub = lab.registry.split(':')[0]!;
  const runtimeDir = loadConfig(process.env, REPO_ROOT).agentRuntimeDir;
  const overrides: Record<string, string> = {
    KUBERNETES_SERVICE_HOST: hub,
    KUBERNETES_SERVICE_PORT: '6443',
    SBX_REDIS_URL: process.env.SBX_LAB_REDIS_URL!,
    SBX_REDIS_PREFIX: identity.prefix,
    SBX_OWNER: identity.owner,
    SBX_IMAGE: lab.image,
    SBX_K8S_PLAIN_HTTP_REGISTRIES: lab.registry,
    SBX_K8S_NODE_PIDS_LIMIT: '512',
    SBX_AGENT_RELAY_DIR: process.env.SBX_LAB_RELAY_DIR!,
    SBX_AGENT_RUNTIME: runtimeDir,
    SBX_LOG_LEVEL: 'warn',
    // The link Service's name in the manifest; here the front's address, which the lab's certificate carries.
    SBX_LINK_TLS_PEER_NAME: hub,
  };
  container.env = [
    ...container.env.filter((e: { name: string }) => !(e.name in overrides)),
    ...Object.entries(overrides).map(([name, value]) => ({ name, value })),
  ];
  container.image = lab.image;
  container.command = ['node', join(REPO_ROOT, 'dist/control-plane/main.js')];
  container.volumeMounts = [
    ...container.volumeMounts.filter((m: { name: string }) => m.name !== 'runtime'),
    { name: 'runtime', mountPath: runtimeDir, readOnly: true },
    { name: 'checkout', mountPath: REPO_ROOT, readOnly: true },
  ];
  pod.hostNetwork = true;
  pod.nodeSelector = { 'sbx.runtime': 'runc' };
  pod.volumes = [
    ...pod.volumes.filter((v: { name: string }) => !['artifacts', 'runtime'].includes(v.name)),
    { name: 'artifacts', hostPath: { path: artifactDir, type: 'Directory' } },
    { name: 'runtime', hostPath: { path: runtimeDir, type: 'Directory' } },
    { name: 'checkout', hostPath: { path: REPO_ROOT, type: 'Directory' } },
  ];
  return docs.filter((d) => d.kind !== 'PersistentVolumeClaim');
}

describe('the control plane deployed into the cluster', () => {
  it('control-plane.yaml runs two replicas on two nodes; a lease made through the one address is served by both', async () => {
    // One installation behind the lab's link front at a time: the account's control plane (above)
    // would be handed the deployed replicas' agent connections, and refuse their tokens.
    await h.close();
    const identity = planeIdentity('deployed');
    const tlsDir = join(process.env.SBX_LAB_DIR!, 'tls');
    const ns = ['-n', 'sbx-system'];
    const secret = (name: string, ...from: string[]): Promise<string> =>
      kubectl(lab.kubeconfig, ...ns, 'create', 'secret', 'generic', name, ...from);
    await secret(
      'sbx-control-plane',
      `--from-literal=api-key=${identity.apiKey}`,
      `--from-literal=secrets-key=${identity.secretsKey}`,
      `--from-literal=preview-key=${randomBytes(32).toString('base64')}`,
    );
    await secret('sbx-redis', `--from-literal=password=${loadConfig(process.env, REPO_ROOT).redis.password ?? ''}`);
    await secret(
      'sbx-link-tls',
      `--from-file=tls.crt=${tlsDir}/link.pem`,
      `--from-file=tls.key=${tlsDir}/link.key`,
      `--from-file=ca.crt=${tlsDir}/ca.pem`,
    );
    const manifest = join(await scratch('deployed-'), 'control-plane.yaml');
    await writeFile(manifest, (await labDeployment(identity, await scratch('deployed-artifacts-'))).map((d) => stringify(d)).join('---\n'));
    await kubectl(lab.kubeconfig, 'apply', '-f', manifest);
    try {
      const selector = 'app.kubernetes.io/name=sbx-control-plane-cluster';
      const ready = await eventually(
        async () => JSON.parse(await kubectl(lab.kubeconfig, ...ns, 'get', 'pods', '-l', selector, '-o', 'json')).items as any[],
        (pods) => pods.length === 2 && pods.every((p) => p.status.conditions?.some((c: any) => c.type === 'Ready' && c.status === 'True')),
        120_000,
        500,
      );
      const nodes = ready.map((p) => p.spec.nodeName as string).sort();
      expect(new Set(nodes).size).toBe(2);
      const front = new SbxClient(`http://${process.env.SBX_LAB_API}`, identity.apiKey);
      const lease = await front.createSandbox();
      expect((await execIn(() => front)(lease.id, 'echo deployed')).stdout).toBe('deployed\n');
      // Each replica, at its own address, answers for the lease and reaches its agent's tunnel.
      for (const pod of ready) {
        const replica = new SbxClient(`http://${pod.status.podIP}:7070`, identity.apiKey);
        expect((await replica.getSandbox(lease.id)).status).toBe('ready');
        await replica.uploadTar(
          lease.id,
          '/workspace',
          await tarBytes([{ name: `from-${pod.spec.nodeName}`, content: pod.spec.nodeName }]),
        );
      }
      expect((await execIn(() => front)(lease.id, 'cat /workspace/from-*')).stdout).toBe(nodes.join(''));
      await front.releaseSandbox(lease.id);
    } finally {
      await kubectl(lab.kubeconfig, 'delete', '-f', manifest, '--wait=true').catch(() => undefined);
    }
  });
});
