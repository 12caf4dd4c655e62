/**
 * The admin API against a real control plane, Docker engine and Redis: API keys with roles and
 * tenants, tenant isolation of every sandbox route, policy versions (PUT, DELETE) that never
 * reach a running lease, and the audit log of all of it.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { SbxClient } from '../sdk/index.js';
import { digestOf } from '../contract/digest.js';
import { ErrorBody } from '../contract/errors.js';
import type { Lease } from '../contract/objects.js';
import { REPO_ROOT, docker, routesOf, tarBytes, useHarness, apiAs, type Answer, eventually } from './fixtures/index.js';

const h = useHarness();

/** One request with `key`; the JSON answer (or null for a body that is not JSON). */
const api = apiAs(() => h.url);

/** Asserts an error answer: status, code, and no stack trace in it. */
function expectError(answer: Answer, status: number, code: string): Record<string, any> {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  const { error } = ErrorBody.parse(answer.body);
  expect(error.code).toBe(code);
  return error.details ?? {};
}

/** Creates an API key through the API (as the bootstrap admin); returns its id and secret. */
async function createKey(role: 'admin' | 'user', tenant: string, name = `${role}-${tenant}`): Promise<{ id: string; secret: string }> {
  const answer = await api(h.apiKey, 'POST', '/v1/api-keys', { name, role, tenant });
  expect(answer.status, JSON.stringify(answer.body)).toBe(201);
  return { id: answer.body.id, secret: answer.body.secret };
}

const registeredRoutes = (): Array<{ method: string; path: string }> => routesOf(h.plane.app);

/** The policy files the store is seeded with: every policies/*.yaml, by name. */
const SHIPPED_POLICIES = readdirSync(join(REPO_ROOT, 'policies'))
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => f.replace(/\.yaml$/, ''))
  .sort();

const ADMIN_PREFIXES = ['/v1/api-keys', '/v1/policies', '/v1/audit', '/v1/secrets', '/v1/tenants'];
const isAdminRoute = (path: string): boolean => ADMIN_PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));

/** The current `default` policy as a PUT body (name and version left out: both are optional), changed by `edit`. */
async function defaultPolicyWith(edit: (p: any) => void): Promise<Record<string, any>> {
  const current = await api(h.apiKey, 'GET', '/v1/policies/default');
  const body = structuredClone(current.body.policy);
  delete body.name;
  delete body.version;
  edit(body);
  return body;
}

async function auditOf(query: string): Promise<any[]> {
  const answer = await api(h.apiKey, 'GET', `/v1/audit?${query}`);
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  return answer.body.entries;
}

describe('admin routes and API keys', () => {
  it('every admin route answers a user key 403 auth.admin_required and changes nothing', async () => {
    const user = await createKey('user', 'alpha');
    const admin = registeredRoutes().filter((r) => isAdminRoute(r.path));
    // The route tree is the list: a new admin route is covered without editing this test.
    expect(admin.map((r) => `${r.method} ${r.path}`).sort()).toEqual([
      'DELETE /v1/api-keys/:id',
      'DELETE /v1/policies/:name',
      'DELETE /v1/secrets/:name',
      'GET /v1/api-keys',
      'GET /v1/audit',
      'GET /v1/policies',
      'GET /v1/policies/:name',
      'GET /v1/policies/:name/proposals',
      'GET /v1/policies/:name/versions',
      'GET /v1/policies/:name/versions/:version',
      'GET /v1/secrets',
      'GET /v1/secrets/:name',
      'GET /v1/tenants/:tenant/quota',
      'POST /v1/api-keys',
      'POST /v1/policies/:name/proposals/accept',
      'PUT /v1/policies/:name',
      'PUT /v1/secrets/:name',
      'PUT /v1/tenants/:tenant/quota',
    ]);
    const policyBody = await defaultPolicyWith((p) => (p.description = 'user edit'));
    const fill = (path: string): string =>
      path.replace(':id', user.id).replace(':name', 'default').replace(':version', '1').replace(':tenant', 'alpha');
    for (const route of admin) {
      const secret = route.path.startsWith('/v1/secrets');
      const quota = route.path.startsWith('/v1/tenants');
      const body =
        route.method === 'PUT'
          ? secret
            ? { value: 'user-written' }
            : quota
              ? { maxSandboxes: 1000 }
              : policyBody
          : route.method === 'POST'
            ? { name: 'x', role: 'admin', tenant: 'alpha' }
            : undefined;
      expectError(await api(user.secret, route.method, fill(route.path), body), 403, 'auth.admin_required');
    }
    // Nothing the user asked for happened: its key is live, default is unchanged, no admin key was made.
    expect((await api(user.secret, 'GET', '/v1/sandboxes')).status).toBe(200);
    expect((await api(h.apiKey, 'GET', '/v1/policies/default')).body.version).toBe(1);
    const keys = (await api(h.apiKey, 'GET', '/v1/api-keys')).body.keys as Array<{ role: string; tenant: string }>;
    expect(keys.filter((k) => k.role === 'admin' && k.tenant === 'alpha')).toEqual([]);
    expectError(await api(h.apiKey, 'GET', '/v1/secrets/default'), 404, 'secret.not_found');
    expect((await api(h.apiKey, 'GET', '/v1/tenants/alpha/quota')).body.configured).toBeNull();
  });

  it('a created key works at once, is listed without its secret, and fails 401 from the request after its revocation', async () => {
    const created = await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'ci bot', role: 'user', tenant: 'beta' });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'ci bot', role: 'user', tenant: 'beta', createdBy: 'bootstrap', revokedAt: null });
    expect(created.body.secret).toMatch(/^sbx_[A-Za-z0-9_-]{43}$/);
    const { id, secret } = created.body;
    expect((await api(secret, 'GET', '/v1/sandboxes')).status).toBe(200);

    const listed = await api(h.apiKey, 'GET', '/v1/api-keys');
    const text = JSON.stringify(listed.body);
    expect(text).toContain(id);
    expect(text).not.toContain(secret);
    expect(text).not.toContain('sha256');
    // Not in Redis in clear either.
    const keys = await h.redis.keys(`${h.config.redisPrefix}*`);
    for (const key of keys.filter((k) => k.includes('api-key'))) expect(JSON.stringify(await h.redis.hgetall(key))).not.toContain(secret);

    const revoked = await api(h.apiKey, 'DELETE', `/v1/api-keys/${id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.revokedAt).not.toBeNull();
    expectError(await api(secret, 'GET', '/v1/sandboxes'), 401, 'auth.invalid_api_key');
    // Revoking again is a no-op; an unknown id is key.not_found; the bootstrap key is not in the store.
    expect((await api(h.apiKey, 'DELETE', `/v1/api-keys/${id}`)).body.revokedAt).toBe(revoked.body.revokedAt);
    expectError(await api(h.apiKey, 'DELETE', '/v1/api-keys/key_00000000000000000000'), 404, 'key.not_found');
    expectError(await api(h.apiKey, 'DELETE', '/v1/api-keys/bootstrap'), 404, 'key.not_found');
  });

  it('a bad key body is input.invalid naming every field, and creates no key', async () => {
    const before = (await api(h.apiKey, 'GET', '/v1/api-keys')).body.keys.length;
    const details = expectError(
      await api(h.apiKey, 'POST', '/v1/api-keys', { name: '', role: 'root', tenant: 'Not A Tenant', extra: 1 }),
      400,
      'input.invalid',
    );
    const paths = (details.issues as Array<{ path: string }>).map((i) => i.path);
    expect(paths).toEqual(expect.arrayContaining(['body.name', 'body.role', 'body.tenant']));
    expect(JSON.stringify(details)).toContain('extra');
    expect((await api(h.apiKey, 'GET', '/v1/api-keys')).body.keys.length).toBe(before);
  });

  it('an admin key of another tenant is admin: it manages keys and sees every tenant', async () => {
    const admin = await createKey('admin', 'ops');
    expect((await api(admin.secret, 'GET', '/v1/policies')).status).toBe(200);
    const made = await api(admin.secret, 'POST', '/v1/api-keys', { name: 'made by ops', role: 'user', tenant: 'gamma' });
    expect(made.body.createdBy).toBe(admin.id);
  });
});

describe('tenancy', () => {
  let userA: string;
  let userB: string;
  let leaseB: Lease;
  let callB: string;

  beforeAll(async () => {
    userA = (await createKey('user', 'tenant-a')).secret;
    userB = (await createKey('user', 'tenant-b')).secret;
    leaseB = await new SbxClient(h.url, userB).createSandbox();
    const call = await api(userB, 'POST', `/v1/sandboxes/${leaseB.id}/calls?wait=30`, {
      tool: 'exec',
      args: { argv: ['true'] },
      callId: 'b-call',
    });
    expect(call.status, JSON.stringify(call.body)).toBe(200);
    callB = 'b-call';
  });

  it('a lease records the tenant of the key that created it; the bootstrap key is tenant default', async () => {
    expect(leaseB.tenant).toBe('tenant-b');
    const own = await h.client.createSandbox();
    expect(own.tenant).toBe('default');
    await h.client.releaseSandbox(own.id);
  });

  /** Valid bodies of the terminal, stdin and session routes (a body is validated before the lease guard runs). */
  const TERMINAL_BODIES: Array<[string, unknown]> = [
    ['/terminals', { cols: 80, rows: 24, cmd: 'true' }],
    ['/input', { data: 'x' }],
    ['/resize', { cols: 80, rows: 24 }],
    ['/stdin', { eof: true }],
    ['/exec', { cmd: 'true' }],
  ];
  it("every sandbox route answers tenant A's user key 404 lease.not_found for tenant B's sandbox, and B's own key gets past the check", async () => {
    const routes = registeredRoutes().filter((r) => r.path.startsWith('/v1/sandboxes/:id'));
    expect(routes.length).toBeGreaterThanOrEqual(8);
    const request = async (who: 'a' | 'b', route: { method: string; path: string }): Promise<Answer> => {
      const path =
        route.path
          .replace(':id', leaseB.id)
          .replace(':callId', callB)
          .replace(':artifactId', 'art_00000000')
          .replace(':pid', '1')
          .replace(':terminalId', 'term_missing')
          .replace(':sessionId', 'ses_missing')
          .replace(':port', '8000') + (route.path.endsWith('/files') || route.path.endsWith('/files/watch') ? '?path=/workspace' : '');
      const body =
        route.path.endsWith('/files') && route.method === 'PUT'
          ? await tarBytes([{ name: `from-${who}.txt`, content: who }])
          : route.method === 'POST'
            ? route.path.endsWith('/calls')
              ? { tool: 'exec', args: { cmd: `touch /workspace/by-${who}` }, callId: `${who}-call` }
              : route.path.endsWith('/renew')
                ? { ttlSeconds: 600 }
                : route.path.endsWith('/checkpoints')
                  ? { includeMemory: true }
                  : route.path.endsWith('/phase')
                    ? { name: 'agent' }
                    : route.path.endsWith('/policy')
                      ? { version: 1 }
                      : (TERMINAL_BODIES.find(([suffix]) => route.path.endsWith(suffix))?.[1] ?? {})
            : undefined;
      // The events stream of a finished call ends by itself; ask for nothing after its last event.
      return api(
        who === 'a' ? userA : userB,
        route.method,
        path,
        body,
        route.path.endsWith('/events') ? { 'last-event-id': '999999' } : {},
      );
    };
    for (const route of routes.filter((r) => r.method !== 'DELETE')) {
      const missing = expectError(await request('a', route), 404, 'lease.not_found');
      expect(missing).toEqual({ id: leaseB.id });
      if (route.path.endsWith('/files/watch')) {
        // A watch is an open-ended stream: B's gets past the check when its answer starts as one.
        const watch = new AbortController();
        const answer = await fetch(`${h.url}/v1/sandboxes/${leaseB.id}/files/watch?path=/workspace`, {
          headers: { authorization: `Bearer ${userB}` },
          signal: watch.signal,
        });
        expect(answer.status, route.path).toBe(200);
        watch.abort();
        continue;
      }
      const own = await request('b', route);
      expect(own.body?.error?.code, `${route.method} ${route.path}`).not.toBe('lease.not_found');
      // B's own pause got past the check: resumed at once, so B's later calls and files run.
      if (route.path.endsWith('/pause')) expect((await api(userB, 'POST', `/v1/sandboxes/${leaseB.id}/resume`)).status).toBe(200);
    }
    expectError(await api(userA, 'DELETE', `/v1/sandboxes/${leaseB.id}`), 404, 'lease.not_found');
    // Nothing A asked for reached the sandbox: it is still ready, A's call and file never ran.
    expect((await api(userB, 'GET', `/v1/sandboxes/${leaseB.id}`)).body.status).toBe('ready');
    expectError(await api(userB, 'GET', `/v1/sandboxes/${leaseB.id}/calls/a-call`), 404, 'call.not_found');
    const ls = await api(userB, 'POST', `/v1/sandboxes/${leaseB.id}/calls?wait=30`, {
      tool: 'exec',
      args: { cmd: 'sleep 1; ls /workspace' },
    });
    expect(ls.body.stdout).toMatch(/from-b\.txt/);
    expect(ls.body.stdout).not.toMatch(/by-a|from-a/);
  });

  it("another tenant's receipt is receipt.not_found", async () => {
    const call = await api(userB, 'GET', `/v1/sandboxes/${leaseB.id}/calls/${callB}`);
    const receiptId = call.body.result.receipt.receiptId as string;
    expect((await api(userB, 'GET', `/v1/receipts/${receiptId}`)).status).toBe(200);
    expectError(await api(userA, 'GET', `/v1/receipts/${receiptId}`), 404, 'receipt.not_found');
    expect((await api(h.apiKey, 'GET', `/v1/receipts/${receiptId}`)).status).toBe(200);
  });

  it("a user's list holds only its tenant's sandboxes; an admin's holds every tenant's", async () => {
    const leaseA = await new SbxClient(h.url, userA).createSandbox();
    const ids = async (key: string): Promise<string[]> =>
      ((await api(key, 'GET', '/v1/sandboxes')).body.sandboxes as Lease[]).map((l) => l.id);
    expect(await ids(userA)).toContain(leaseA.id);
    expect(await ids(userA)).not.toContain(leaseB.id);
    expect(await ids(userB)).toContain(leaseB.id);
    expect(await ids(userB)).not.toContain(leaseA.id);
    expect(await ids(h.apiKey)).toEqual(expect.arrayContaining([leaseA.id, leaseB.id]));
    expect((await api(h.apiKey, 'GET', `/v1/sandboxes/${leaseB.id}`)).status).toBe(200);
  });

  it("one Idempotency-Key in two tenants makes two sandboxes (a tenant never replays another's)", async () => {
    const headers = { 'idempotency-key': 'shared-key-1' };
    const a = await api(userA, 'POST', '/v1/sandboxes', {}, headers);
    const b = await api(userB, 'POST', '/v1/sandboxes', {}, headers);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(a.body.id).not.toBe(b.body.id);
    expect((await api(userA, 'POST', '/v1/sandboxes', {}, headers)).body.id).toBe(a.body.id);
  });

  it("an admin key releases any tenant's sandbox", async () => {
    const released = await api(h.apiKey, 'DELETE', `/v1/sandboxes/${leaseB.id}`);
    expect(released.body.status).toBe('released');
    expectError(
      await api(userB, 'POST', `/v1/sandboxes/${leaseB.id}/calls`, { tool: 'exec', args: { argv: ['true'] } }),
      410,
      'lease.released',
    );
  });
});

describe('policy versions', () => {
  it('the policy files seed the store as version 1, audited as system', async () => {
    const listed = await api(h.apiKey, 'GET', '/v1/policies');
    expect(listed.body.policies.map((p: { name: string }) => p.name)).toEqual(SHIPPED_POLICIES);
    const current = (await api(h.apiKey, 'GET', '/v1/policies/default')).body;
    expect(current).toMatchObject({ name: 'default', version: 1, createdBy: 'system' });
    expect(current.digest).toBe(digestOf(current.policy));
    const [seed] = await auditOf('action=policy.seed&target=policy:default');
    expect(seed).toMatchObject({ actor: 'system', beforeDigest: null, afterDigest: current.digest, details: { version: 1 } });
  });

  it('a restart imports nothing again (the store already has each file version)', async () => {
    const before = (await auditOf('action=policy.seed')).length;
    const peer = await h.startPeer();
    await peer.close();
    expect((await auditOf('action=policy.seed')).length).toBe(before);
  });

  it('PUT makes version n+1; a lease created before keeps its version, digest, manifest and limits; a new lease gets the new version', async () => {
    const v1 = (await api(h.apiKey, 'GET', '/v1/policies/default')).body;
    const before = await h.client.createSandbox();
    expect(before.policy).toEqual({ name: 'default', version: v1.version, digest: v1.digest });

    const put = await api(h.apiKey, 'PUT', '/v1/policies/default', await defaultPolicyWith((p) => (p.resources.pids = 256)));
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toMatchObject({ name: 'default', version: v1.version + 1, createdBy: 'bootstrap' });
    expect(put.body.digest).not.toBe(v1.digest);
    expect(put.body.digest).toBe(digestOf(put.body.policy));

    const still = await h.client.getSandbox(before.id);
    expect(still.policy).toEqual(before.policy);
    expect(still.manifest).toEqual(before.manifest);
    expect(still.manifest!.policy.digest).toBe(v1.digest);
    const after = await h.client.createSandbox();
    expect(after.policy).toEqual({ name: 'default', version: put.body.version, digest: put.body.digest });
    expect(after.manifest!.policy.digest).toBe(put.body.digest);
    // The limits each container runs with are its own version's.
    const pids = async (id: string): Promise<number> => JSON.parse(await docker('inspect', `sbx-${id}`))[0].HostConfig.PidsLimit;
    expect(await pids(before.id)).toBe(512);
    expect(await pids(after.id)).toBe(256);
    // The old version stays addressable; a lease may ask for it by number.
    const pinned = await h.client.createSandbox({ policy: { name: 'default', version: v1.version } });
    expect(pinned.policy.digest).toBe(v1.digest);
    const history = (await api(h.apiKey, 'GET', '/v1/policies/default/versions')).body;
    expect(history.versions.map((v: { version: number }) => v.version)).toEqual([v1.version, put.body.version]);
    expect((await api(h.apiKey, 'GET', `/v1/policies/default/versions/${v1.version}`)).body.digest).toBe(v1.digest);
  });

  it('a body version is a compare-and-swap: not the next version is 409 policy.version_conflict; the next one is taken', async () => {
    const latest = (await api(h.apiKey, 'GET', '/v1/policies/default')).body.version as number;
    const body = await defaultPolicyWith((p) => (p.description = 'cas'));
    const stale = expectError(
      await api(h.apiKey, 'PUT', '/v1/policies/default', { ...body, version: latest }),
      409,
      'policy.version_conflict',
    );
    expect(stale).toEqual({ expected: latest + 1, given: latest });
    expect((await api(h.apiKey, 'GET', '/v1/policies/default')).body.version).toBe(latest);
    const ok = await api(h.apiKey, 'PUT', '/v1/policies/default', { ...body, version: latest + 1, name: 'default' });
    expect(ok.body.version).toBe(latest + 1);
  });

  it('an invalid PUT is 400 policy.invalid listing every problem with its path, and stores no version', async () => {
    const versions = (await api(h.apiKey, 'GET', '/v1/policies/default/versions')).body.versions.length;
    const body = await defaultPolicyWith((p) => {
      p.name = 'other';
      p.network.mode = 'sideways';
      p.resources.cpus = -1;
      p.resources.ttlSeconds = p.resources.maxTtlSeconds + 1;
      p.filesystem.writableRoots[0].path = 'relative';
      p.privileged = true;
    });
    const details = expectError(await api(h.apiKey, 'PUT', '/v1/policies/default', { ...body, version: 'two' }), 400, 'policy.invalid');
    expect((details.issues as Array<{ path: string }>).map((i) => i.path).sort()).toEqual([
      'filesystem.writableRoots.0.path',
      'name',
      'network.mode',
      'privileged',
      'resources.cpus',
      'resources.ttlSeconds',
      'version',
    ]);
    expect((await api(h.apiKey, 'GET', '/v1/policies/default/versions')).body.versions.length).toBe(versions);
    expectError(await api(h.apiKey, 'PUT', '/v1/policies/default', [1, 2]), 400, 'policy.invalid');
    expectError(await api(h.apiKey, 'PUT', '/v1/policies/Bad_Name', body), 400, 'input.invalid');
  });

  it('DELETE tombstones: new leases naming it are 404 policy.not_found, a running lease keeps working, a later PUT revives it with the next version', async () => {
    const created = await api(h.apiKey, 'PUT', '/v1/policies/team', await defaultPolicyWith(() => undefined));
    expect([created.status, created.body.version, created.body.name]).toEqual([201, 1, 'team']);
    const user = await createKey('user', 'team-tenant');
    const userClient = new SbxClient(h.url, user.secret);
    // Any key may lease under any live policy.
    const running = await userClient.createSandbox({ policy: 'team' });

    const deleted = await api(h.apiKey, 'DELETE', '/v1/policies/team');
    expect(deleted.status).toBe(200);
    expect(deleted.body).toMatchObject({ name: 'team', latest: 1, deletedBy: 'bootstrap' });
    await expect(userClient.createSandbox({ policy: 'team' })).rejects.toMatchObject({
      status: 404,
      code: 'policy.not_found',
      info: { details: { known: SHIPPED_POLICIES } },
    });
    await expect(userClient.createSandbox({ policy: { name: 'team', version: 1 } })).rejects.toMatchObject({
      status: 404,
      code: 'policy.not_found',
    });
    expectError(await api(h.apiKey, 'GET', '/v1/policies/team'), 404, 'policy.not_found');
    expect((await api(h.apiKey, 'GET', '/v1/policies')).body.policies.map((p: { name: string }) => p.name)).not.toContain('team');
    expect((await api(h.apiKey, 'GET', '/v1/policies/team/versions')).body).toMatchObject({
      deletedBy: 'bootstrap',
      versions: [{ version: 1 }],
    });
    // Deleting again changes nothing; an unknown name is policy.not_found.
    expect((await api(h.apiKey, 'DELETE', '/v1/policies/team')).body.deletedAt).toBe(deleted.body.deletedAt);
    expectError(await api(h.apiKey, 'DELETE', '/v1/policies/never-was'), 404, 'policy.not_found');

    const r = await userClient.submitCall(running.id, 'exec', { argv: ['echo', 'still here'] }, { waitSeconds: 30 });
    expect(r).toMatchObject({ status: 'succeeded', stdout: 'still here\n' });
    expect((await userClient.getSandbox(running.id)).policy).toEqual(running.policy);

    const revived = await api(h.apiKey, 'PUT', '/v1/policies/team', await defaultPolicyWith(() => undefined));
    expect([revived.status, revived.body.version]).toEqual([201, 2]);
    expect((await userClient.createSandbox({ policy: 'team' })).policy.version).toBe(2);
  });
});

describe('audit log', () => {
  it('records key, policy and lease changes with actor, time and before/after digests', async () => {
    const user = await createKey('user', 'audited', 'audited user');
    const keyView = (await api(h.apiKey, 'GET', '/v1/api-keys')).body.keys.find((k: { id: string }) => k.id === user.id);
    const [keyCreate] = await auditOf(`action=api_key.create&target=api_key:${user.id}`);
    expect(keyCreate).toMatchObject({
      actor: { keyId: 'bootstrap', role: 'admin', tenant: 'default' },
      beforeDigest: null,
      afterDigest: digestOf(keyView),
    });
    expect(Date.parse(keyCreate.at)).toBeGreaterThan(Date.now() - 60_000);

    const body = await defaultPolicyWith((p) => (p.description = 'audited'));
    const first = (await api(h.apiKey, 'PUT', '/v1/policies/audited', body)).body;
    const second = (await api(h.apiKey, 'PUT', '/v1/policies/audited', { ...body, description: 'audited, again' })).body;
    await api(h.apiKey, 'DELETE', '/v1/policies/audited');
    const policyEntries = await auditOf('target=policy:audited');
    expect(policyEntries.map((e) => [e.action, e.beforeDigest, e.afterDigest])).toEqual([
      ['policy.delete', second.digest, null],
      ['policy.put', first.digest, second.digest],
      ['policy.put', null, first.digest],
    ]);

    const userClient = new SbxClient(h.url, user.secret);
    const lease = await userClient.createSandbox();
    await userClient.releaseSandbox(lease.id);
    const leaseEntries = await auditOf(`target=lease:${lease.id}`);
    expect(leaseEntries.map((e) => [e.action, e.beforeDigest, e.afterDigest])).toEqual([
      ['lease.release', lease.manifest!.digest, null],
      ['lease.create', null, lease.manifest!.digest],
    ]);
    for (const e of leaseEntries) expect(e.actor).toEqual({ keyId: user.id, role: 'user', tenant: 'audited' });

    await api(h.apiKey, 'DELETE', `/v1/api-keys/${user.id}`);
    const [revoke] = await auditOf(`action=api_key.revoke&target=api_key:${user.id}`);
    expect(revoke).toMatchObject({ beforeDigest: digestOf(keyView), afterDigest: null });
  });

  it('expiry is recorded as lease.expire by system', async () => {
    const lease = await h.client.createSandbox({ ttlSeconds: 1 });
    const entries = await eventually(
      () => auditOf(`action=lease.expire&target=lease:${lease.id}`),
      (e) => e.length > 0,
      20_000,
      250,
    );
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ actor: 'system', beforeDigest: lease.manifest!.digest, afterDigest: null });
  });

  it('pages newest first with a cursor, every entry once; a bad cursor is input.invalid', async () => {
    const all = await auditOf('limit=500');
    const ids = all.map((e) => e.id);
    const byTime = [...ids].sort((a, b) => {
      const [am, an] = a.split('-').map(Number) as [number, number];
      const [bm, bn] = b.split('-').map(Number) as [number, number];
      return bm - am || bn - an;
    });
    expect(ids).toEqual(byTime);
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Answer = await api(h.apiKey, 'GET', `/v1/audit?limit=7${cursor ? `&cursor=${cursor}` : ''}`);
      paged.push(...page.body.entries.map((e: { id: string }) => e.id));
      cursor = page.body.nextCursor;
    } while (cursor);
    expect(paged).toEqual(ids);
    expectError(await api(h.apiKey, 'GET', '/v1/audit?cursor=latest'), 400, 'input.invalid');
    expectError(await api(h.apiKey, 'GET', '/v1/audit?limit=0'), 400, 'input.invalid');
  });

  it('the log has no route that updates or deletes an entry', async () => {
    const audit = registeredRoutes().filter((r) => r.path.startsWith('/v1/audit'));
    expect(audit).toEqual([{ method: 'GET', path: '/v1/audit' }]);
  });
});
