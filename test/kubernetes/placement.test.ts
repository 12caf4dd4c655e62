/**
 * Placement on Kubernetes: leases go where there is room (the scheduler scores nodes by their
 * free capacity), so four of them spread over the two runc nodes; the metrics say where each runs.
 */
import { describe, expect, it } from 'vitest';
import { useHarness } from '../fixtures/index.js';
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
});
