/**
 * A node lost: its link to the lab cut (the veth between its network namespace and the hub's
 * bridge, where the test runs, set down). Kubernetes marks it NotReady after the controller
 * manager's grace period (16 s in the lab; 40 s by default) and evicts its sandboxes after their
 * toleration (`SBX_K8S_NODE_LOST_AFTER_SECONDS`, 10 s); reconcile then finds the lease's Pod going
 * away, turns the lease `lost` and settles its running call once. The link restored, the node's
 * kubelet removes what it still ran.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { eventually, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const run = promisify(execFile);
const lab = useKubernetesLab('node-loss');
const h = useHarness(() => lab.settings());

describe('a node lost', () => {
  it('turns its leases lost within the documented bound and settles their running calls once', async () => {
    const lease = await h.client.createSandbox();
    const running = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 600' }, { waitSeconds: 0 });
    await eventually(
      () => h.client.getCall(lease.id, running.callId),
      (call) => call.status === 'running',
    );
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    const node = pod!.spec!.nodeName!;
    const link = `v${node}`;
    const cutAt = Date.now();
    await run('ip', ['link', 'set', link, 'down']);
    try {
      const lost = await eventually(
        () => h.client.getSandbox(lease.id),
        (l) => l.status === 'lost',
        90_000,
        500,
      );
      const seconds = (Date.now() - cutAt) / 1000;
      console.log(`lease ${lease.id} on ${node} lost ${seconds.toFixed(1)} s after its node's link was cut (${lost.endReason})`);
      // The bound: the node's grace period (16 s here) + the sandbox's toleration (10 s) + the taint manager's and reconcile's rounds.
      expect(seconds).toBeLessThan(60);
      const call = await eventually(
        () => h.client.getCall(lease.id, running.callId),
        (c) => c.status === 'finished',
      );
      expect(call.result!.status).toBe('effect_unknown');
      expect(call.result!.receipt).toMatchObject({ commitState: 'unknown', exit: null });
    } finally {
      await run('ip', ['link', 'set', link, 'up']);
    }
    // Back on the network, the node becomes Ready and its kubelet stops the Pod the cluster no longer has.
    await eventually(
      () => lab.core.readNode({ name: node }),
      (n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true,
      90_000,
      500,
    );
    expect(await lab.pods(`sbx.lease=${lease.id}`)).toEqual([]);
    const engine = `unix://${process.env.SBX_LAB_DIR}/n${node.slice(lab.nodePrefix.length)}/docker.sock`;
    await eventually(
      async () =>
        (await run('docker', ['-H', engine, 'ps', '-q', '--filter', `label=io.kubernetes.pod.name=${pod!.metadata!.name}`])).stdout.trim(),
      (ids) => ids === '',
      90_000,
      500,
    );
  });
});
