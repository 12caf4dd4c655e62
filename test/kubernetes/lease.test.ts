/**
 * The Kubernetes driver on the lab's 3 nodes (test/lab/k8s-lab.sh): a lease is a Pod with the
 * isolation its policy asks, its agent answers calls through the same queue as on Docker, and
 * its release leaves no Pod.
 */
import { describe, expect, it } from 'vitest';
import { execIn, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('lease');
const h = useHarness(() => lab.settings());
const exec = execIn(() => h.client);

describe('a lease on Kubernetes', () => {
  it('is a Pod of the lease, owner and installation, with no service account token, and its agent runs tools as the tool user', async () => {
    const lease = await h.client.createSandbox();
    expect(lease.status).toBe('ready');
    const pods = await lab.pods(`sbx.lease=${lease.id},sbx.owner=${h.config.owner}`);
    expect(pods).toHaveLength(1);
    const pod = pods[0]!;
    expect(pod.spec).toMatchObject({ automountServiceAccountToken: false, enableServiceLinks: false, restartPolicy: 'Never' });
    expect(pod.spec!.nodeName).toMatch(new RegExp(`^${lab.nodePrefix}[0-9]$`));
    // Nothing of the control plane's host is mounted: the node relay's directory (node-local) and the
    // agent runtime are the only host paths; the agent's config came as a Secret, gone once the agent runs.
    const hostPaths = pod.spec!.volumes!.flatMap((v) => (v.hostPath ? [v.hostPath.path] : []));
    expect(hostPaths.sort()).toEqual([h.config.agentRuntimeDir, process.env.SBX_LAB_RELAY_DIR].sort());
    expect(pod.spec!.volumes!.filter((v) => v.secret).map((v) => v.secret!.secretName)).toEqual([`${pod.metadata!.name}-agent`]);
    expect((await lab.core.listNamespacedSecret({ namespace: lab.namespace, labelSelector: `sbx.lease=${lease.id}` })).items).toEqual([]);
    // The image ran by the digest the control plane read from the registry.
    expect(pod.spec!.containers[0]!.image).toMatch(new RegExp(`^${lab.registry}/sbx-sandbox@sha256:[0-9a-f]{64}$`));

    const result = await exec(
      lease.id,
      'id -u; grep -E "^(NoNewPrivs|Seccomp|CapEff):" /proc/self/status; wc -l < /proc/net/route; ulimit -n',
    );
    expect(result.status).toBe('succeeded');
    const lines = result.stdout.trim().split('\n');
    expect(lines[0]).toBe('1000');
    expect(lines).toContain('NoNewPrivs:\t1');
    expect(lines).toContain('Seccomp:\t2');
    expect(lines).toContain('CapEff:\t0000000000000000');
    // Network none: no route (the routing table's header line alone).
    expect(lines[4]).toBe('1');
    expect(lines[5]).toBe('4096');

    await h.client.releaseSandbox(lease.id);
    expect(await lab.pods(`sbx.lease=${lease.id}`)).toEqual([]);
  });

  it('enforces the writable roots: each is a filesystem of its size, owned by the tool user', async () => {
    const lease = await h.client.createSandbox();
    const result = await exec(
      lease.id,
      'df -k /workspace /tmp /home/sandbox | tail -n +2; stat -c "%n %u %a" /workspace /tmp /home/sandbox; echo x > /workspace/f && echo written',
    );
    expect(result.status).toBe('succeeded');
    const out = result.stdout;
    // The default policy: 1 GiB, 512 MiB, 256 MiB.
    expect(out).toMatch(/ 1048576 .* \/workspace/);
    expect(out).toMatch(/ 524288 .* \/tmp/);
    expect(out).toMatch(/ 262144 .* \/home\/sandbox/);
    expect(out).toContain('/workspace 1000 755');
    expect(out).toContain('/tmp 0 1777');
    expect(out).toContain('written');
    await h.client.releaseSandbox(lease.id);
  });
});
