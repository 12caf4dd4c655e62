/**
 * A policy's OCI runtime by RuntimeClass (SBX_K8S_RUNTIME_CLASSES) instead of node labels: the
 * sandbox Pod names the class, and the class's own scheduling and handler place and run it. The
 * lab's nodes run dockershim, whose one handler is `docker`, so the test's class for gVisor
 * schedules onto the node whose engine runs runsc; a cluster on containerd names its `runsc`
 * handler instead (deploy/kubernetes/kubernetes-driver/runtimeclass-gvisor.yaml).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execIn, testRunId, useHarness, useScratchDirs } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('runtime-class');
const scratch = useScratchDirs();
const runtimeClass = `sbx-test-${testRunId()}-gvisor`;

beforeAll(async () => {
  const file = join(await scratch('runtime-class-'), 'runtimeclass.yaml');
  await writeFile(
    file,
    `apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: ${runtimeClass}, labels: {sbx.test-run: "${testRunId()}"}}\n` +
      `handler: docker\nscheduling: {nodeSelector: {sbx.runtime: runsc}}\n`,
  );
  await lab.kubectl(['apply', '-f', file]);
});

afterAll(async () => {
  await lab.kubectl(['delete', 'runtimeclass', runtimeClass, '--ignore-not-found']);
});

const h = useHarness(() => ({ ...lab.settings(), SBX_K8S_RUNTIME_CLASSES: `runsc=${runtimeClass}` }));
const exec = execIn(() => h.client);

describe('a RuntimeClass for a runtime', () => {
  it("is named by the Pod of a policy of that runtime, and the class, not the driver's node label, places it: a gVisor policy lands on the gVisor node", async () => {
    const lease = await h.client.createSandbox({ policy: 'hardened' });
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    expect(pod!.spec!.runtimeClassName).toBe(runtimeClass);
    // The class's scheduling, merged in by the API server's RuntimeClass admission, put it there.
    expect(pod!.spec!.nodeSelector!['sbx.runtime']).toBe('runsc');
    const node = await lab.core.readNode({ name: pod!.spec!.nodeName! });
    expect(node.metadata!.labels!['sbx.runtime']).toBe('runsc');
    expect((await exec(lease.id, 'uname -r')).stdout.trim()).toBe('4.4.0');
    await h.client.releaseSandbox(lease.id);
  });

  it('leaves a runtime without a class to the node labels', async () => {
    const lease = await h.client.createSandbox();
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    expect(pod!.spec!.runtimeClassName).toBeUndefined();
    expect(pod!.spec!.nodeSelector!['sbx.runtime']).toBe('runc');
    await h.client.releaseSandbox(lease.id);
  });
});
