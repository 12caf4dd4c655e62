/**
 * Tenant quotas against a real control plane, Docker engine and Redis: the default from
 * `SBX_DEFAULT_TENANT_QUOTA`, admin PUT/GET (audited), concurrent creates over the limit (exactly
 * the allowed number succeed), release and failed creates giving capacity back, other tenants
 * unaffected, CPU and memory limits, and reservations repaired after a crash.
 */
import { describe, expect, it } from 'vitest';
import { ErrorBody } from '../contract/errors.js';
import { buildImage, removeImages, useHarness, apiAs, type Answer, eventually } from './fixtures/index.js';

const h = useHarness({ SBX_DEFAULT_TENANT_QUOTA: JSON.stringify({ maxSandboxes: 2 }) });

const api = apiAs(() => h.url);

async function userKey(tenant: string): Promise<string> {
  const answer = await api(h.apiKey, 'POST', '/v1/api-keys', { name: `quota-${tenant}`, role: 'user', tenant });
  expect(answer.status).toBe(201);
  return answer.body.secret;
}

const quota = (tenant: string): Promise<Answer> => api(h.apiKey, 'GET', `/v1/tenants/${tenant}/quota`);

describe('tenant quotas', () => {
  it('concurrent creates over the limit: exactly the allowed number succeed, the rest are 429 quota.exceeded; release frees capacity; other tenants are unaffected', async () => {
    const alpha = await userKey('qalpha');
    const beta = await userKey('qbeta');
    expect((await quota('qalpha')).body).toEqual({
      tenant: 'qalpha',
      limits: { maxSandboxes: 2, maxCpus: null, maxMemoryBytes: null },
      configured: null,
      usage: { sandboxes: 0, cpus: 0, memoryBytes: 0 },
    });

    const answers = await Promise.all([1, 2, 3, 4].map(() => api(alpha, 'POST', '/v1/sandboxes', {})));
    const created = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status !== 201);
    expect(created).toHaveLength(2);
    expect(refused).toHaveLength(2);
    for (const answer of refused) {
      expect(answer.status).toBe(429);
      const { error } = ErrorBody.parse(answer.body);
      expect(error.code).toBe('quota.exceeded');
      expect(error.details).toEqual({ tenant: 'qalpha', resource: 'sandboxes', limit: 2, used: 2, requested: 1 });
    }
    // A refused create left nothing: only the two leases exist for the tenant.
    expect((await api(alpha, 'GET', '/v1/sandboxes')).body.sandboxes).toHaveLength(2);
    expect((await quota('qalpha')).body.usage).toEqual({ sandboxes: 2, cpus: 4, memoryBytes: 2 * 2147483648 });

    // Another tenant has its own count.
    const other = await api(beta, 'POST', '/v1/sandboxes', {});
    expect(other.status).toBe(201);

    // Releasing one gives its share back at once.
    expect((await api(alpha, 'DELETE', `/v1/sandboxes/${created[0]!.body.id}`)).status).toBe(200);
    expect((await quota('qalpha')).body.usage.sandboxes).toBe(1);
    const again = await api(alpha, 'POST', '/v1/sandboxes', {});
    expect(again.status).toBe(201);
    for (const id of [created[1]!.body.id, again.body.id]) await api(alpha, 'DELETE', `/v1/sandboxes/${id}`);
    await api(beta, 'DELETE', `/v1/sandboxes/${other.body.id}`);
    expect((await quota('qalpha')).body.usage).toEqual({ sandboxes: 0, cpus: 0, memoryBytes: 0 });
    expect((await quota('qbeta')).body.usage).toEqual({ sandboxes: 0, cpus: 0, memoryBytes: 0 });
  });

  it('an admin PUT sets limits over the default field by field (null: no limit), is audited, and CPU and memory limits count the policy resources', async () => {
    const gamma = await userKey('qgamma');
    // The default policy asks for 2 CPUs and 2 GiB.
    const put = await api(h.apiKey, 'PUT', '/v1/tenants/qgamma/quota', { maxCpus: 3 });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      tenant: 'qgamma',
      limits: { maxSandboxes: 2, maxCpus: 3, maxMemoryBytes: null },
      configured: { maxCpus: 3 },
    });
    const first = await api(gamma, 'POST', '/v1/sandboxes', {});
    expect(first.status).toBe(201);
    const overCpu = await api(gamma, 'POST', '/v1/sandboxes', {});
    expect(overCpu.status).toBe(429);
    expect(ErrorBody.parse(overCpu.body).error.details).toEqual({ tenant: 'qgamma', resource: 'cpus', limit: 3, used: 2, requested: 2 });

    await api(h.apiKey, 'PUT', '/v1/tenants/qgamma/quota', { maxSandboxes: null, maxMemoryBytes: 3 * 1024 ** 3 });
    const overMemory = await api(gamma, 'POST', '/v1/sandboxes', {});
    expect(overMemory.status).toBe(429);
    expect(ErrorBody.parse(overMemory.body).error.details).toMatchObject({
      resource: 'memoryBytes',
      limit: 3 * 1024 ** 3,
      used: 2 * 1024 ** 3,
      requested: 2 * 1024 ** 3,
    });

    const entries = (await api(h.apiKey, 'GET', '/v1/audit?action=quota.put&target=tenant:qgamma')).body.entries;
    expect(entries).toHaveLength(2);
    expect(entries[0]).toMatchObject({
      actor: { keyId: 'bootstrap', role: 'admin' },
      details: { limits: { maxSandboxes: null, maxMemoryBytes: 3 * 1024 ** 3 } },
    });
    expect(entries[0].beforeDigest).toBe(entries[1].afterDigest);

    // `{}` returns the tenant to the default.
    expect((await api(h.apiKey, 'PUT', '/v1/tenants/qgamma/quota', {})).body.limits).toEqual({
      maxSandboxes: 2,
      maxCpus: null,
      maxMemoryBytes: null,
    });
    await api(gamma, 'DELETE', `/v1/sandboxes/${first.body.id}`);
  });

  it('bad input is 400 input.invalid naming the field; user keys get 403 auth.admin_required', async () => {
    for (const [path, body, field] of [
      ['/v1/tenants/qgamma/quota', { maxSandboxes: -1 }, 'body.maxSandboxes'],
      ['/v1/tenants/qgamma/quota', { maxCpus: 'many' }, 'body.maxCpus'],
      ['/v1/tenants/qgamma/quota', { maxPids: 3 }, 'body'],
      ['/v1/tenants/Not_A_Tenant/quota', {}, 'params.tenant'],
    ] as const) {
      const answer = await api(h.apiKey, 'PUT', path, body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      const { error } = ErrorBody.parse(answer.body);
      expect(error.code).toBe('input.invalid');
      expect((error.details as { issues: Array<{ path: string }> }).issues.map((i) => i.path)).toContain(field);
    }
    const user = await userKey('qdelta');
    expect((await api(user, 'GET', '/v1/tenants/qdelta/quota')).status).toBe(403);
    expect((await api(user, 'PUT', '/v1/tenants/qdelta/quota', { maxSandboxes: 100 })).status).toBe(403);
  });

  it('a create that fails after reserving gives its share back', async () => {
    const epsilon = await userKey('qepsilon');
    // An image whose /workspace is a file: the engine cannot mount the writable root there, so
    // the create fails at container start, after the share was reserved.
    const tag = await buildImage('unmountable', `FROM ${h.config.image}\nRUN rm -rf /workspace && touch /workspace\n`);
    try {
      const failed = await api(epsilon, 'POST', '/v1/sandboxes', { image: tag });
      expect(ErrorBody.parse(failed.body).error.code).toBe('lease.create_failed');
      expect((await quota('qepsilon')).body.usage).toEqual({ sandboxes: 0, cpus: 0, memoryBytes: 0 });
    } finally {
      await removeImages();
    }
  });

  it('reservations are repaired from the leases: one left by a create that died is released, a live lease without one is counted', async () => {
    const zeta = await userKey('qzeta');
    const prefix = h.config.redisPrefix;
    // What a control plane that died between reserving and writing its lease leaves behind.
    await h.redis.hset(
      `${prefix}quota:reservations`,
      'sbx_ghost',
      JSON.stringify({ tenant: 'qzeta', milliCpus: 2000, memoryBytes: 1024, atMs: Date.now() - 3_600_000 }),
    );
    await h.redis.hset(`${prefix}quota:usage:qzeta`, 'sandboxes', 1, 'milliCpus', 2000, 'memoryBytes', 1024);
    await eventually(
      () => quota('qzeta'),
      (q) => q.body.usage.sandboxes === 0,
      10_000,
    );
    expect((await quota('qzeta')).body.usage).toEqual({ sandboxes: 0, cpus: 0, memoryBytes: 0 });

    // A live lease whose reservation is gone (made before quotas existed) is counted again.
    const lease = await api(zeta, 'POST', '/v1/sandboxes', {});
    expect(lease.status).toBe(201);
    await h.redis.hdel(`${prefix}quota:reservations`, lease.body.id);
    await h.redis.del(`${prefix}quota:usage:qzeta`);
    await eventually(
      () => quota('qzeta'),
      (q) => q.body.usage.sandboxes === 1,
      10_000,
    );
    await api(zeta, 'DELETE', `/v1/sandboxes/${lease.body.id}`);
    expect((await quota('qzeta')).body.usage.sandboxes).toBe(0);
  });
});
