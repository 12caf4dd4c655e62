/**
 * deploy/kubernetes/kubernetes-driver/ applied to the lab with kubectl, as an admin would: the
 * sandbox namespace, the deny-all NetworkPolicy and the RBAC of the control plane's
 * ServiceAccount (`sbx-system/sbx-control-plane`). A control plane authenticated by that account's
 * token alone then does the driver's whole job in `sbx-sandboxes` — a lease, a call, files, a
 * restart that adopts the lease, a warm pool, release — and the account may do nothing else.
 * Then the cluster side itself: Redis (`redis.yaml`), the node relays (`node-relay.yaml`) and two
 * control-plane replicas (`control-plane.yaml`) as Pods of the cluster, leasing through the one
 * address, with the lab's substitutions for what the lab lacks (lab-deployment.ts).
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { SbxClient } from '../../sdk/index.js';
import { eventually, execIn, planeIdentity, REPO_ROOT, tarBytes, useHarness, useScratchDirs } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';
import { deployedRelayDir, deployedRuntimeRoot, labDeployment } from './lab-deployment.js';

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
  // Waited for: the namespaces are gone, with everything in them, when the file ends.
  await kubectl(lab.kubeconfig, 'delete', '--timeout=120s', ...MANIFESTS.flatMap((f) => ['-f', f])).catch(() => undefined);
  await kubectl(lab.kubeconfig, 'delete', 'namespace', 'sbx-system', '--timeout=120s').catch(() => undefined);
}, 260_000);

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

describe('the control plane, Redis and node relays deployed into the cluster', () => {
  it('redis.yaml, node-relay.yaml and control-plane.yaml run there; a lease made through the one address is served by both replicas', async () => {
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
    await secret('sbx-redis', `--from-literal=password=${randomBytes(16).toString('hex')}`);
    // The lab's one certificate names every node's address, Redis's among them.
    await secret('sbx-redis-tls', `--from-file=tls.crt=${tlsDir}/link.pem`, `--from-file=tls.key=${tlsDir}/link.key`);
    await secret(
      'sbx-link-tls',
      `--from-file=tls.crt=${tlsDir}/link.pem`,
      `--from-file=tls.key=${tlsDir}/link.key`,
      `--from-file=ca.crt=${tlsDir}/ca.pem`,
    );
    const runcNodes = JSON.parse(await kubectl(lab.kubeconfig, 'get', 'nodes', '-l', 'sbx.runtime=runc', '-o', 'json')).items as any[];
    const redisNode = {
      name: runcNodes[0].metadata.name as string,
      address: runcNodes[0].status.addresses.find((a: { type: string }) => a.type === 'InternalIP').address as string,
    };
    const docs = await labDeployment({
      lab,
      redisNode,
      identity,
      artifactDir: await scratch('deployed-artifacts-'),
      redisDataDir: await scratch('deployed-redis-'),
    });
    const manifest = join(await scratch('deployed-'), 'deployment.yaml');
    await writeFile(manifest, docs.map((d) => stringify(d)).join('---\n'));
    await kubectl(lab.kubeconfig, 'apply', '-f', manifest);
    try {
      const readyPods = (selector: string, count: number): Promise<any[]> =>
        eventually(
          async () => JSON.parse(await kubectl(lab.kubeconfig, ...ns, 'get', 'pods', '-l', selector, '-o', 'json')).items as any[],
          (pods) =>
            pods.length === count && pods.every((p) => p.status.conditions?.some((c: any) => c.type === 'Ready' && c.status === 'True')),
          120_000,
          500,
        );
      await readyPods('app.kubernetes.io/name=sbx-redis', 1);
      const relays = await readyPods('app.kubernetes.io/name=sbx-node-relay', runcNodes.length);
      const ready = await readyPods('app.kubernetes.io/name=sbx-control-plane-cluster', 2);
      const nodes = ready.map((p) => p.spec.nodeName as string).sort();
      expect(new Set(nodes).size).toBe(2);
      const front = new SbxClient(`http://${process.env.SBX_LAB_API}`, identity.apiKey);
      const lease = await front.createSandbox();
      // The sandbox's agent came in through its node's deployed relay, not the lab's own.
      const [sandboxPod] = JSON.parse(
        await kubectl(lab.kubeconfig, '-n', 'sbx-sandboxes', 'get', 'pods', '-l', `sbx.lease=${lease.id}`, '-o', 'json'),
      ).items as any[];
      const hostPaths = sandboxPod.spec.volumes.map((v: any) => v.hostPath?.path as string | undefined);
      expect(hostPaths).toContain(deployedRelayDir());
      expect(relays.map((p) => p.spec.nodeName)).toContain(sandboxPod.spec.nodeName);
      // Its agent runtime is the one the relay's init container installed on each node.
      expect(hostPaths).toContain(join(deployedRuntimeRoot(), '0.1.0'));
      for (const relay of relays)
        expect(await kubectl(lab.kubeconfig, ...ns, 'logs', relay.metadata.name, '-c', 'install-agent-runtime')).toMatch(
          /^agent runtime 0\.1\.0 (is )?installed$/m,
        );
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
      // Redis's Pod replaced: its data and the agents' ACL users (the ACL file) are on its volume,
      // so the agent logs in again and the lease goes on.
      const [redisPod] = await readyPods('app.kubernetes.io/name=sbx-redis', 1);
      await kubectl(lab.kubeconfig, ...ns, 'delete', 'pod', redisPod.metadata.name);
      await eventually(
        async () => (await readyPods('app.kubernetes.io/name=sbx-redis', 1))[0].metadata.uid as string,
        (uid) => uid !== redisPod.metadata.uid,
        120_000,
        500,
      );
      expect((await execIn(() => front)(lease.id, 'echo after the restart')).stdout).toBe('after the restart\n');
      await front.releaseSandbox(lease.id);
    } finally {
      await kubectl(lab.kubeconfig, 'delete', '-f', manifest, '--wait=true').catch(() => undefined);
    }
  });
});
