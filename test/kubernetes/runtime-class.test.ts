/**
 * A policy's OCI runtime by RuntimeClass (SBX_K8S_RUNTIME_CLASSES) instead of node labels: the
 * sandbox Pod names the class, and the class's own scheduling and handler place and run it; the
 * sandbox's prepare step then checks that a gVisor policy got gVisor's kernel. The lab's nodes
 * run dockershim, whose one handler is `docker` (the engine's default runtime), so the test's
 * class for gVisor schedules onto the node whose engine runs runsc, by a label of the test's
 * own; pointed at a runc node, the same class must be refused. A cluster on containerd names
 * its `runsc` handler instead (deploy/kubernetes/kubernetes-driver/runtimeclass-gvisor.yaml).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execIn, testRunId, useHarness, useScratchDirs } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('runtime-class');
const scratch = useScratchDirs();
const runtimeClass = `sbx-test-${testRunId()}-gvisor`;
/** The label the class schedules by: the driver knows nothing of it. */
const classLabel = `sbx.test/class-${testRunId()}`;
let gvisorNode = '';
let runcNode = '';

/** (Re)makes the class, scheduling onto nodes labelled `classLabel=value`. */
async function applyClass(value: string): Promise<void> {
  await lab.kubectl(['delete', 'runtimeclass', runtimeClass, '--ignore-not-found']);
  const file = join(await scratch('runtime-class-'), 'runtimeclass.yaml');
  await writeFile(
    file,
    `apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: ${runtimeClass}, labels: {sbx.test-run: "${testRunId()}"}}\n` +
      `handler: docker\nscheduling: {nodeSelector: {${classLabel}: ${value}}}\n`,
  );
  await lab.kubectl(['apply', '-f', file]);
}

beforeAll(async () => {
  const nodes = (await lab.core.listNode()).items;
  gvisorNode = nodes.find((n) => n.metadata!.labels!['sbx.runtime'] === 'runsc')!.metadata!.name!;
  runcNode = nodes.find((n) => n.metadata!.labels!['sbx.runtime'] === 'runc')!.metadata!.name!;
  await lab.kubectl(['label', 'node', gvisorNode, `${classLabel}=gvisor`]);
  await lab.kubectl(['label', 'node', runcNode, `${classLabel}=runc`]);
  await applyClass('gvisor');
});

afterAll(async () => {
  await lab.kubectl(['delete', 'runtimeclass', runtimeClass, '--ignore-not-found']);
  for (const node of [gvisorNode, runcNode].filter(Boolean)) await lab.kubectl(['label', 'node', node, `${classLabel}-`]);
});

const h = useHarness(() => ({ ...lab.settings(), SBX_K8S_RUNTIME_CLASSES: `runsc=${runtimeClass}` }));
const exec = execIn(() => h.client);

describe('a RuntimeClass for a runtime', () => {
  it("is named by the Pod of a policy of that runtime, and the class, not the driver's node label, places it: a gVisor policy runs on gVisor", async () => {
    const lease = await h.client.createSandbox({ policy: 'hardened' });
    try {
      const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
      expect(pod!.spec!.runtimeClassName).toBe(runtimeClass);
      // The class's scheduling, merged in by the API server's RuntimeClass admission; the driver's own label is absent.
      expect(pod!.spec!.nodeSelector![classLabel]).toBe('gvisor');
      expect(pod!.spec!.nodeSelector!['sbx.runtime']).toBeUndefined();
      expect(pod!.spec!.nodeName).toBe(gvisorNode);
      expect((await exec(lease.id, 'uname -r')).stdout.trim()).toBe('4.4.0');
    } finally {
      await h.client.releaseSandbox(lease.id);
    }
  });

  it('that gives a gVisor policy another runtime is refused by the sandbox itself: 422 policy.unenforceable, no Pod kept', async () => {
    await applyClass('runc');
    try {
      await expect(h.client.createSandbox({ policy: 'hardened' })).rejects.toMatchObject({
        status: 422,
        code: 'policy.unenforceable',
        message: expect.stringContaining('gVisor'),
      });
      expect((await lab.pods()).filter((p) => p.metadata?.labels?.['sbx.lease'])).toEqual([]);
    } finally {
      await applyClass('gvisor');
    }
  });

  it('leaves a runtime without a class to the node labels', async () => {
    const lease = await h.client.createSandbox();
    try {
      const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
      expect(pod!.spec!.runtimeClassName).toBeUndefined();
      expect(pod!.spec!.nodeSelector!['sbx.runtime']).toBe('runc');
    } finally {
      await h.client.releaseSandbox(lease.id);
    }
  });
});
