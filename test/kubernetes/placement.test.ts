/**
 * Placement on Kubernetes: leases go where there is room (the scheduler scores nodes by their
 * free capacity), so four of them spread over the two runc nodes; the metrics say where each runs.
 * A policy's node labels (`runtime.nodeLabels`) put its sandboxes on the nodes that carry them,
 * and a label no node carries is a full cluster for that policy: `503 capacity.exhausted` at once.
 */
import { describe, expect, it } from 'vitest';
import { apiAs, putPolicyVariant, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('placement');
const h = useHarness(() => lab.settings());

/** `sbx_sandboxes` samples of `GET /metrics`: node → count. */
async function sandboxesByNode(): Promise<Record<string, number>> {
  const text = await (await fetch(`${h.url}/metrics`)).text();
  return Object.fromEntries([...text.matchAll(/^sbx_sandboxes\{node="([^"]+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
}

describe('placement on Kubernetes', () => {
  it('spreads leases over the nodes with room, and sbx_sandboxes counts them by node', async () => {
    const leases = await Promise.all([1, 2, 3, 4].map(() => h.client.createSandbox()));
    const nodes = await Promise.all(leases.map(async (l) => (await lab.pods(`sbx.lease=${l.id}`))[0]!.spec!.nodeName!));
    const perNode: Record<string, number> = {};
    for (const node of nodes) perNode[node] = (perNode[node] ?? 0) + 1;
    // Both runc nodes (node 3 is gVisor's, for gVisor policies only). Not exactly two each: the
    // scheduler also scores a node that holds the image already (ImageLocality).
    expect(Object.keys(perNode).sort()).toEqual([`${lab.nodePrefix}1`, `${lab.nodePrefix}2`]);
    expect(await sandboxesByNode()).toEqual(perNode);
    await Promise.all(leases.map((l) => h.client.releaseSandbox(l.id)));
    expect(await sandboxesByNode()).toEqual({});
  });

  it("puts a policy's sandboxes on the nodes with its node labels, and answers 503 at once when no node has them", async () => {
    const node = `${lab.nodePrefix}2`;
    await lab.kubectl(['label', 'node', node, 'sbx.test/zone=b']);
    try {
      await putPolicyVariant(h, 'zone-b', (p) => {
        p.runtime.nodeLabels = { 'sbx.test/zone': 'b' };
      });
      await putPolicyVariant(h, 'zone-c', (p) => {
        p.runtime.nodeLabels = { 'sbx.test/zone': 'c' };
      });
      const leases = await Promise.all([1, 2, 3].map(() => h.client.createSandbox({ policy: 'zone-b' })));
      for (const lease of leases) expect((await lab.pods(`sbx.lease=${lease.id}`))[0]!.spec!.nodeName).toBe(node);
      const startedAt = Date.now();
      await expect(h.client.createSandbox({ policy: 'zone-c' })).rejects.toMatchObject({ status: 503, code: 'capacity.exhausted' });
      console.log(`[placement] a policy no node can take answered 503 in ${Date.now() - startedAt} ms`);
      expect(
        (await lab.pods()).filter(
          (p) => p.metadata?.labels?.['sbx.lease'] && !leases.some((l) => l.id === p.metadata!.labels!['sbx.lease']),
        ).length,
      ).toBe(0);
      await Promise.all(leases.map((l) => h.client.releaseSandbox(l.id)));
    } finally {
      await lab.kubectl(['label', 'node', node, 'sbx.test/zone-']);
      for (const name of ['zone-b', 'zone-c']) await apiAs(() => h.url)(h.apiKey, 'DELETE', `/v1/policies/${name}`);
    }
  });
});
