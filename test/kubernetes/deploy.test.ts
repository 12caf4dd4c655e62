/**
 * deploy/kubernetes/kubernetes-driver/ applied to the lab with kubectl, as an admin would: the
 * sandbox namespace, the deny-all NetworkPolicy and the RBAC of the control plane's
 * ServiceAccount (`sbx-system/sbx-control-plane`). A control plane authenticated by that account's
 * token alone then does the driver's whole job in `sbx-sandboxes` — a lease, a call, files, a
 * restart that adopts the lease, a warm pool, release — and the account may do nothing else.
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, execIn, REPO_ROOT, tarBytes, useHarness, useScratchDirs } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const run = promisify(execFile);
const lab = useKubernetesLab('deploy');
const scratch = useScratchDirs();
const MANIFESTS = ['namespace.yaml', 'networkpolicy.yaml', 'rbac.yaml'].map((f) =>
  join(REPO_ROOT, 'deploy/kubernetes/kubernetes-driver', f),
);
const kubectlBin = join(process.env.SBX_K8S_CACHE ?? '/var/cache/sbx/k8s-1.20.2', 'kubectl');
let accountKubeconfig = '';

async function kubectl(kubeconfig: string, ...args: string[]): Promise<string> {
  return (await run(kubectlBin, ['--kubeconfig', kubeconfig, ...args])).stdout;
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
