/**
 * Reconcile on Kubernetes: Pods are found by their labels. A Pod deleted behind the control
 * plane's back turns its lease `lost` and settles its running call once; a restarted control
 * plane adopts the Pods of its live leases, whose agents go on answering.
 */
import { describe, expect, it } from 'vitest';
import { podName } from '../../control-plane/runtime/kubernetes-pod.js';
import { eventually, execIn, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('reconcile');
const h = useHarness(() => lab.settings());
const exec = execIn(() => h.client);

describe('reconcile on Kubernetes', () => {
  it('adopts the live leases after a restart: their Pods stay, their agents answer the new process', async () => {
    const lease = await h.client.createSandbox();
    await exec(lease.id, 'echo before > /workspace/mark');
    const [before] = await lab.pods(`sbx.lease=${lease.id}`);
    await h.restart();
    const [after] = await lab.pods(`sbx.lease=${lease.id}`);
    expect(after!.metadata!.uid).toBe(before!.metadata!.uid);
    expect((await h.client.getSandbox(lease.id)).status).toBe('ready');
    expect((await exec(lease.id, 'cat /workspace/mark')).stdout).toBe('before\n');
    await h.client.releaseSandbox(lease.id);
  });

  it("turns a lease lost when its Pod is deleted behind the control plane's back, and settles its running call once", async () => {
    const lease = await h.client.createSandbox();
    const running = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 600' }, { waitSeconds: 0 });
    await eventually(
      () => h.client.getCall(lease.id, running.callId),
      (call) => call.status === 'running',
    );
    await lab.core.deleteNamespacedPod({ name: podName(lease.id), namespace: lab.namespace, gracePeriodSeconds: 0 });
    const lost = await eventually(
      () => h.client.getSandbox(lease.id),
      (l) => l.status === 'lost',
      60_000,
    );
    expect(lost.endReason).toMatch(/^container_(missing|exited)$/);
    // Exactly one terminal status: the agent saw its process killed as the Pod was deleted (Kubernetes
    // signals the containers first, even at grace 0) and said so in a receipt, or it was gone first and
    // the lease's end settled the call as effect_unknown. Never `succeeded`, never left running.
    const call = await eventually(
      () => h.client.getCall(lease.id, running.callId),
      (c) => c.status === 'finished',
    );
    if (call.result!.status === 'effect_unknown') expect(call.result!.receipt).toMatchObject({ commitState: 'unknown', exit: null });
    else expect(call.result!.receipt!.exit!.signal).toMatch(/^SIG(TERM|KILL)$/);
  });
});
