/**
 * What a sandbox on Kubernetes can and cannot reach, what runs where, and what the driver
 * refuses: the lab's own servers on the hub and a node see nothing from a sandbox; a node whose
 * Pods get a route fails the sandbox's network check; gVisor
 * policies land on gVisor nodes; a policy with a network of its own is refused before any Pod
 * exists; files move through the agent's byte tunnel as on Docker.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { AGENT_RUNTIME_BUSYBOX } from '../../contract/agent-runtime.js';
import { PREPARE_CONTAINER, PREPARE_EXIT } from '../../control-plane/runtime/kubernetes-pod.js';
import { apiAs, eventually, execIn, putPolicyVariant, tarBytes, testRunId, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('isolation');
/** A TCP server on argv[1]: prints `port N`, then one line per connection. */
const NODE_LISTENER =
  "const s=require('net').createServer(c=>{console.log('accepted '+c.remoteAddress);c.destroy()});" +
  "s.listen(0,process.argv[1],()=>console.log('port '+s.address().port))";
const h = useHarness(() => lab.settings());
const exec = execIn(() => h.client);

describe('a sandbox on Kubernetes', () => {
  it("reaches nothing: a server of the test's own on the hub (API server, registry, Redis side) receives no connection", async () => {
    // The test runs in the lab's hub namespace: the hub's bridge address is where the API server and the registry listen.
    const hubAddress = lab.registry.split(':')[0]!;
    const accepted: string[] = [];
    const server = net.createServer((socket) => {
      accepted.push(String(socket.remoteAddress));
      socket.destroy();
    });
    server.listen(0, hubAddress);
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    try {
      const lease = await h.client.createSandbox();
      const probe = (host: string, p: number): string =>
        `(exec 3<>/dev/tcp/${host}/${p}) 2>/dev/null && echo "open ${host}:${p}" || echo "closed ${host}:${p}"`;
      const result = await exec(lease.id, [probe(hubAddress, port), probe(hubAddress, 6443), probe(hubAddress, 5000)].join('; '));
      expect(result.stdout.trim().split('\n')).toEqual([
        `closed ${hubAddress}:${port}`,
        `closed ${hubAddress}:6443`,
        `closed ${hubAddress}:5000`,
      ]);
      expect(accepted).toEqual([]);
      await h.client.releaseSandbox(lease.id);
    } finally {
      server.close();
    }
  });

  it("reaches no node: a server of the test's own in a node's namespace, and the nodes' kubelets, see nothing", async () => {
    const nodes = (await lab.core.listNode()).items;
    const nodeIps = nodes.map((n) => n.status!.addresses!.find((a) => a.type === 'InternalIP')!.address);
    // A listener in node 1's network namespace that prints what connects to it.
    const listener = spawn('nsenter', [`--net=/run/netns/${lab.nodePrefix}1`, process.execPath, '-e', NODE_LISTENER, nodeIps[0]!], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const lines = createInterface({ input: listener.stdout! });
      const seen: string[] = [];
      const port = await new Promise<number>((resolve) =>
        lines.on('line', (line) => (line.startsWith('port ') ? resolve(Number(line.slice(5))) : seen.push(line))),
      );
      const lease = await h.client.createSandbox();
      const targets = [`${nodeIps[0]}:${port}`, ...nodeIps.map((ip) => `${ip}:10250`)];
      const probes = targets.map((t) => `(exec 3<>/dev/tcp/${t.replace(':', '/')}) 2>/dev/null && echo "open ${t}" || echo "closed ${t}"`);
      const result = await exec(lease.id, probes.join('; '));
      expect(result.stdout.trim().split('\n')).toEqual(targets.map((t) => `closed ${t}`));
      expect(seen).toEqual([]);
      await h.client.releaseSandbox(lease.id);
    } finally {
      listener.kill();
    }
  });

  it("cannot use the node relay's sockets as the tool user: only the agent (root) may connect", async () => {
    const lease = await h.client.createSandbox();
    const connect = (path: string): string =>
      `/opt/sbx/bin/node -e 'require("net").connect(process.argv[1]).on("connect",()=>{console.log("connected");process.exit(0)}).on("error",e=>console.log(e.code))' ${path}`;
    const result = await exec(lease.id, `id -u; ${connect('/run/sbx/link/redis.sock')}; ${connect('/run/sbx/link/link.sock')}`);
    expect(result.stdout.trim().split('\n')).toEqual(['1000', 'EACCES', 'EACCES']);
    await h.client.releaseSandbox(lease.id);
  });

  it("fails closed where a node gives Pods a route: the sandbox Pod's own network check, run with its node's network, exits networkOpen", async () => {
    // The lab's CNI gives Pods none; host networking stands in for a node whose CNI gives one.
    // The check is the sandbox Pod's own prepare step, copied with its volumes into a Pod of the
    // test's that carries no lease label (the control plane never sees it).
    const lease = await h.client.createSandbox();
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    const prepare = pod!.spec!.initContainers!.find((c) => c.name === PREPARE_CONTAINER)!;
    const used = new Set(prepare.volumeMounts!.map((m) => m.name));
    // The same copy on the Pod network (none) passes: the route alone makes the difference.
    const checks: Record<string, number | undefined> = {};
    try {
      for (const hostNetwork of [true, false]) {
        const name = `route-check-${hostNetwork ? 'host' : 'pod'}-${testRunId()}`;
        await lab.core.createNamespacedPod({
          namespace: lab.namespace,
          body: {
            metadata: { name, labels: { 'sbx.test-run': testRunId() } },
            spec: {
              ...pod!.spec!,
              hostNetwork,
              nodeName: pod!.spec!.nodeName!,
              initContainers: [prepare],
              containers: [
                { name: 'after', image: prepare.image!, command: [AGENT_RUNTIME_BUSYBOX, 'true'], volumeMounts: prepare.volumeMounts! },
              ],
              volumes: pod!.spec!.volumes!.filter((v) => used.has(v.name)),
            },
          },
        });
        const terminated = await eventually(
          async () => (await lab.pods()).find((p) => p.metadata!.name === name)?.status?.initContainerStatuses?.[0]?.state?.terminated,
          (t) => t !== undefined,
          60_000,
          250,
        );
        checks[hostNetwork ? 'host network' : 'pod network'] = terminated!.exitCode;
        if (hostNetwork) expect(terminated!.message).toMatch(/route/);
      }
      expect(checks).toEqual({ 'host network': PREPARE_EXIT.networkOpen, 'pod network': 0 });
    } finally {
      // Each attempted, whatever one does; the lab's namespace goes with the file anyway.
      const copies = (await lab.pods('sbx.test-run').catch(() => [])).filter((p) => p.metadata!.name!.startsWith('route-check-'));
      await Promise.allSettled(
        copies.map((p) => lab.core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: lab.namespace, gracePeriodSeconds: 0 })),
      );
      await h.client.releaseSandbox(lease.id);
    }
  });

  it('runs a gVisor policy on a gVisor node (its kernel is gVisor’s)', async () => {
    const lease = await h.client.createSandbox({ policy: 'hardened' });
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    const node = await lab.core.readNode({ name: pod!.spec!.nodeName! });
    expect(node.metadata!.labels!['sbx.runtime']).toBe('runsc');
    const result = await exec(lease.id, 'uname -r');
    expect(result.stdout.trim()).toBe('4.4.0');
    await h.client.releaseSandbox(lease.id);
  });

  it('refuses a policy with a network of its own (422 policy.unenforceable) and makes no Pod', async () => {
    await putPolicyVariant(h, 'k8s-open', (p) => {
      p.network = { mode: 'open' };
    });
    try {
      const api = apiAs(() => h.url);
      const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { policy: 'k8s-open' });
      expect(answer.status).toBe(422);
      expect(answer.body.error.code).toBe('policy.unenforceable');
      expect(answer.body.error.details).toMatchObject({ field: 'network.mode', runtime: 'kubernetes' });
      expect(await lab.pods(`sbx.owner=${h.config.owner}`)).toEqual([]);
    } finally {
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/k8s-open');
    }
  });

  it('refuses, and removes the Pod, when its node cannot enforce the policy: a pids limit of 256 on nodes that give 512', async () => {
    await putPolicyVariant(h, 'k8s-pids', (p) => {
      p.resources.pids = 256;
    });
    try {
      const answer = await apiAs(() => h.url)(h.apiKey, 'POST', '/v1/sandboxes', { policy: 'k8s-pids' });
      expect(answer.status).toBe(422);
      expect(answer.body.error.code).toBe('policy.unenforceable');
      expect(answer.body.error.message).toContain('pids limit 512 is above the policy');
      expect(await lab.pods(`sbx.owner=${h.config.owner}`)).toEqual([]);
    } finally {
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/k8s-pids');
    }
  });

  it("checks a lease's image as on Docker before any registry is asked: no registry, or one off the allowlist, is 400", async () => {
    const api = apiAs(() => h.url);
    for (const image of ['ubuntu:22.04', '127.0.0.1:9/anything:1', `${lab.registry}/../../v2/_catalog`]) {
      const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { image });
      expect([image, answer.status]).toEqual([image, 400]);
      expect(['image.registry_not_allowed', 'image.invalid_reference']).toContain(answer.body.error.code);
    }
    expect(await lab.pods(`sbx.owner=${h.config.owner}`)).toEqual([]);
  });

  it('answers what the driver cannot do with 501 runtime.unsupported naming it: pause, image builds', async () => {
    const lease = await h.client.createSandbox();
    const api = apiAs(() => h.url);
    const pause = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/pause`);
    expect(pause.status).toBe(501);
    expect(pause.body.error).toMatchObject({ code: 'runtime.unsupported', details: { feature: 'pause', runtime: 'kubernetes' } });
    expect((await h.client.getSandbox(lease.id)).status).toBe('ready');
    expect((await exec(lease.id, 'true')).status).toBe('succeeded');
    await h.client.releaseSandbox(lease.id);
    // Image builds: sandbox images come from registries; no build starts and no record is made.
    const build = await api(h.apiKey, 'POST', '/v1/images', await tarBytes([{ name: 'Dockerfile', content: 'FROM scratch\n' }]));
    expect(build.status).toBe(501);
    expect(build.body.error).toMatchObject({ code: 'runtime.unsupported', details: { feature: 'image builds', runtime: 'kubernetes' } });
    expect((await api(h.apiKey, 'GET', '/v1/images')).body.images).toEqual([]);
  });

  it('moves files in and out through the agent, byte for byte', async () => {
    const lease = await h.client.createSandbox();
    const content = Buffer.from(Array.from({ length: 300_000 }, (_, i) => i % 251));
    await h.client.uploadTar(lease.id, '/workspace', await tarBytes([{ name: 'data/blob.bin', content }]));
    const sum = await exec(lease.id, 'sha256sum /workspace/data/blob.bin');
    expect(sum.stdout.split(' ')[0]).toBe((await import('node:crypto')).createHash('sha256').update(content).digest('hex'));
    const dir = await mkdtemp(join(tmpdir(), 'sbx-k8s-download-'));
    try {
      await h.client.download(lease.id, '/workspace/data', dir);
      expect((await readFile(join(dir, 'data', 'blob.bin'))).equals(content)).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    await h.client.releaseSandbox(lease.id);
  });
});
