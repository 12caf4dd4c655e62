/**
 * Above the runtime port nothing changes on Kubernetes: warm pools keep Pods started ahead and a
 * lease claims one, bound to its own env; secrets reach the calls that ask for them and never the
 * Pod's spec; a cluster with no room answers `503 capacity.exhausted` at once and keeps no Pod.
 */
import { describe, expect, it } from 'vitest';
import { apiAs, eventually, execIn, putPolicyVariant, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('pools');
const h = useHarness(() => ({ ...lab.settings(), SBX_WARM_POOLS: JSON.stringify([{ policy: 'default', min: 1, max: 1 }]) }));
const exec = execIn(() => h.client);

describe('pools, secrets and capacity on Kubernetes', () => {
  it('fills a warm pool with a Pod, which a lease claims and binds to its own env; the Pod spec never holds it', async () => {
    const readyKey = `${h.config.redisPrefix}pool:default@${h.config.image}:ready`;
    const [warmId] = await eventually(
      () => h.redis.lrange(readyKey, 0, -1),
      (ids) => ids.length >= 1,
      90_000,
    );
    const lease = await h.client.createSandbox({ env: { FOO: 'warm-bound' } });
    expect(lease.id).toBe(warmId);
    expect((await exec(lease.id, 'printenv FOO')).stdout).toBe('warm-bound\n');
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    expect(JSON.stringify(pod)).not.toContain('warm-bound');
    await h.client.releaseSandbox(lease.id);
  });

  it('delivers a secret to the calls of the lease that asks for it, never into the Pod spec', async () => {
    const value = `k8s-secret-${Date.now().toString(36)}`;
    await h.client.putSecret('NPM_TOKEN', value);
    const lease = await h.client.createSandbox({ policy: 'offline-ci', secrets: [{ name: 'NPM_TOKEN' }] });
    const result = await exec(lease.id, { cmd: 'printenv NPM_TOKEN | sha256sum', secrets: ['NPM_TOKEN'] });
    expect(result.stdout.split(' ')[0]).toBe((await import('node:crypto')).createHash('sha256').update(`${value}\n`).digest('hex'));
    const [pod] = await lab.pods(`sbx.lease=${lease.id}`);
    expect(JSON.stringify(pod)).not.toContain(value);
    await h.client.releaseSandbox(lease.id);
    await h.client.deleteSecret('NPM_TOKEN');
  });

  it('answers 503 capacity.exhausted at once when no node has room, and keeps no Pod', async () => {
    await putPolicyVariant(h, 'k8s-huge', (p) => {
      p.resources.memoryBytes = 4 * 1024 ** 4; // 4 TiB: more than any lab node
    });
    try {
      const startedAt = Date.now();
      const answer = await apiAs(() => h.url)(h.apiKey, 'POST', '/v1/sandboxes', { policy: 'k8s-huge' });
      expect(answer.status).toBe(503);
      expect(answer.body.error).toMatchObject({ code: 'capacity.exhausted', retryability: 'safe' });
      expect(answer.body.error.details.reason).toMatch(/Insufficient memory/);
      expect(Date.now() - startedAt).toBeLessThan(20_000);
      // The warm pool's Pod stays; none of the refused policy's is kept.
      const pods = await lab.pods(`sbx.owner=${h.config.owner}`);
      expect(pods.filter((p) => p.metadata?.annotations?.['sbx.dev/labels']?.includes('"k8s-huge@'))).toEqual([]);
    } finally {
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/k8s-huge');
    }
  });
});
