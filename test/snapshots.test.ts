/**
 * Snapshots and fork (issue 12 part 5) against the real engine: a snapshot holds the sandbox's
 * writable roots (the policy's and the lease's own); forks share no writable state with each
 * other or the parent; tenant scoping, ended sandboxes, fork bounds, delete while in use, and
 * a call in flight during the capture (not waited for, recorded).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, apiAs, docker, execIn, testRunId, useHarness } from './fixtures/index.js';

// A sandbox quota, so a fork of 1,000 meets it (the default has none); a fork bound of 3 under it.
const h = useHarness({ SBX_DEFAULT_TENANT_QUOTA: '{"maxSandboxes": 20}', SBX_FORK_MAX: '3' });
const exec = execIn(() => h.client);
const api = apiAs(() => h.url);
const MiB = 1024 * 1024;
const image = `sbx-test-snap-${testRunId()}:testbed`;
/** Snapshots this file made (ids), their images removed after it whatever happened. */
const made = new Set<string>();

beforeAll(async () => {
  const base = (await readFile(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8')).trim();
  const context = await mkdtemp(join(tmpdir(), 'sbx-snap-'));
  try {
    await writeFile(
      join(context, 'Dockerfile'),
      `FROM ${base}\nUSER root\nRUN mkdir -p /testbed && echo original > /testbed/a.txt && echo doomed > /testbed/gone.txt\n`,
    );
    await docker('build', '-q', '-t', image, context);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
}, 120_000);

afterAll(async () => {
  for (const lease of await h.client.listSandboxes().catch(() => [])) await h.client.releaseSandbox(lease.id).catch(() => undefined);
  for (const s of await h.client.listSnapshots().catch(() => [])) await h.client.deleteSnapshot(s.id).catch(() => undefined);
  for (const id of made) for (const ref of await snapshotImages(id)) await docker('rmi', '-f', ref).catch(() => undefined);
  await docker('rmi', '-f', image).catch(() => undefined);
});

/** The engine refs of snapshot `id`'s image (found by its label; the digest also covers the roots' archives). */
async function snapshotImages(id: string): Promise<string[]> {
  const out = await docker('images', '--filter', `label=sbx.snapshot.id=${id}`, '--format', '{{.Repository}}:{{.Tag}}');
  return out.split('\n').filter(Boolean);
}

describe('snapshots and fork', () => {
  it('a fork has the files of /workspace and of a lease root; writes in one fork appear in no other nor in the parent', async () => {
    const parent = await h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 16 * MiB }] });
    await exec(parent.id, {
      cmd: 'echo ws > /workspace/w.txt && echo changed > /testbed/a.txt && rm /testbed/gone.txt && echo home > ~/h.txt',
    });
    const snap = await h.client.snapshotSandbox(parent.id);
    made.add(snap.id);
    expect(snap).toMatchObject({ parentLeaseId: parent.id, manifestDigest: parent.manifest!.digest, inFlightCalls: [], consistent: false });
    expect(snap.id).toMatch(/^snap_/);
    expect(snap.roots.map((r) => r.path)).toEqual(['/workspace', '/tmp', '/home/sandbox', '/testbed']);
    expect(await h.client.getSnapshot(snap.id)).toEqual(snap);
    expect((await h.client.listSnapshots()).map((s) => s.id)).toContain(snap.id);

    const forks = await h.client.fork(snap.id, { count: 2 });
    expect(forks).toHaveLength(2);
    for (const f of forks) {
      expect(f.manifest!.snapshot).toEqual({ id: snap.id, digest: snap.digest, parentLeaseId: parent.id });
      const r = await exec(f.id, { cmd: 'cat /workspace/w.txt /testbed/a.txt ~/h.txt; ls /testbed; stat -c %U /testbed/a.txt' });
      expect(r.stdout).toBe('ws\nchanged\nhome\na.txt\nsandbox\n');
    }
    await exec(forks[0]!.id, { cmd: 'echo fork0 > /workspace/w.txt && echo fork0 > /testbed/new.txt' });
    const other = await exec(forks[1]!.id, { cmd: 'cat /workspace/w.txt; ls /testbed' });
    expect(other.stdout).toBe('ws\na.txt\n');
    const inParent = await exec(parent.id, { cmd: 'cat /workspace/w.txt; ls /testbed' });
    expect(inParent.stdout).toBe('ws\na.txt\n');

    // A sandbox from the snapshot runs: the snapshot may not be deleted.
    const refused = await api(h.apiKey, 'DELETE', `/v1/snapshots/${snap.id}`);
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: 'snapshot.in_use' });
    for (const f of forks) await h.client.releaseSandbox(f.id);
    expect((await api(h.apiKey, 'DELETE', `/v1/snapshots/${snap.id}`)).status).toBe(204);
    expect((await api(h.apiKey, 'GET', `/v1/snapshots/${snap.id}`)).body.error.code).toBe('snapshot.not_found');
    expect(await snapshotImages(snap.id)).toEqual([]);
  });

  it('POST /v1/sandboxes {snapshot} starts one sandbox from it', async () => {
    const parent = await h.client.createSandbox();
    await exec(parent.id, { cmd: 'echo one > /workspace/one.txt' });
    const snap = await h.client.snapshotSandbox(parent.id);
    made.add(snap.id);
    const child = await h.client.createSandbox({ snapshot: snap.id });
    expect(child.manifest!.snapshot?.parentLeaseId).toBe(parent.id);
    expect((await exec(child.id, { cmd: 'cat /workspace/one.txt' })).stdout).toBe('one\n');
  });

  it('a call in flight is not waited for: the snapshot records it and the call finishes normally', async () => {
    const lease = await h.client.createSandbox();
    const pending = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 3; echo done > /workspace/late.txt' }, { waitSeconds: 0 });
    await expect.poll(async () => (await h.client.getCall(lease.id, pending.callId)).status, { timeout: 20_000 }).toBe('running');
    const snap = await h.client.snapshotSandbox(lease.id);
    made.add(snap.id);
    expect(snap.inFlightCalls).toEqual([pending.callId]);
    const finished = await h.client.submitCall(lease.id, 'exec', { cmd: 'cat /workspace/late.txt' }, { waitSeconds: 30 });
    expect('receipt' in finished && finished.stdout).toBe('done\n');
  });

  it('another tenant cannot lease a snapshot image by its engine tag or image id (404 image.not_found), and sees none of its files', async () => {
    const lease = await h.client.createSandbox();
    await exec(lease.id, 'echo private-data > /workspace/secret.txt');
    const snap = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/snapshots`, {});
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    await h.client.releaseSandbox(lease.id);
    const snapshotId = snap.body.id as string;
    const tag = (await docker('images', '--filter', `label=sbx.snapshot.id=${snapshotId}`, '--format', '{{.Repository}}:{{.Tag}}')).trim();
    expect(tag).toMatch(/^sbx-snapshot:[0-9a-f]{64}$/);
    const imageId = (await docker('image', 'inspect', '--format', '{{.Id}}', tag)).trim();
    const other = await api(h.apiKey, 'POST', '/v1/api-keys', { tenant: 'other-snaptag', role: 'user', name: 'tag' });
    const otherKey = other.body.secret as string;
    for (const image of [tag, imageId]) {
      const answer = await api(otherKey, 'POST', '/v1/sandboxes', { image });
      if (answer.status === 201) await api(otherKey, 'DELETE', `/v1/sandboxes/${answer.body.id as string}`);
      expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(404);
      expect(answer.body.error.code).toBe('image.not_found');
    }
    const mine = await api(h.apiKey, 'POST', `/v1/snapshots/${snapshotId}/fork`, { count: 1 });
    expect(mine.status, JSON.stringify(mine.body).slice(0, 300)).toBe(201);
    await h.client.deleteSnapshot(snapshotId).catch(() => undefined);
  });

  it('snapshot of another tenant’s sandbox, an ended one or a made-up one is 404', async () => {
    const lease = await h.client.createSandbox();
    const other = await api(h.apiKey, 'POST', '/v1/api-keys', { tenant: 'other-snap', role: 'user', name: 'snap' });
    expect(other.status).toBe(201);
    const otherKey = other.body.secret as string;
    expect((await api(otherKey, 'POST', `/v1/sandboxes/${lease.id}/snapshots`, {})).status).toBe(404);
    await h.client.releaseSandbox(lease.id);
    const ended = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/snapshots`, {});
    expect(ended.status).toBe(404);
    expect(ended.body.error.code).toBe('lease.not_found');
    expect((await api(h.apiKey, 'POST', '/v1/sandboxes/sbx_nope/snapshots', {})).status).toBe(404);
    expect((await api(otherKey, 'GET', '/v1/snapshots')).body.snapshots).toEqual([]);
  });

  it('fork count 0 and -1 are 400, 1000 is 429 quota.exceeded, and nothing starts', async () => {
    const lease = await h.client.createSandbox();
    const snap = await h.client.snapshotSandbox(lease.id);
    made.add(snap.id);
    const before = (await h.client.listSandboxes()).length;
    for (const count of [0, -1]) {
      const r = await api(h.apiKey, 'POST', `/v1/snapshots/${snap.id}/fork`, { count });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('input.invalid');
    }
    const tooMany = await api(h.apiKey, 'POST', `/v1/snapshots/${snap.id}/fork`, { count: 1000 });
    expect(tooMany.status).toBe(429);
    expect(tooMany.body.error).toMatchObject({ code: 'quota.exceeded', details: { resource: 'sandboxes', requested: 1000 } });
    expect((await h.client.listSandboxes()).length).toBe(before);
    expect((await api(h.apiKey, 'POST', '/v1/snapshots/snap_00000000000000000000/fork', { count: 1 })).status).toBe(404);
  });

  it('POST /v1/sandboxes {snapshot, count} starts count copies; writes in one never appear in another; a key replays them', async () => {
    const parent = await h.client.createSandbox();
    await exec(parent.id, { cmd: 'echo base > /workspace/b.txt' });
    const snap = await h.client.snapshotSandbox(parent.id);
    made.add(snap.id);
    const key = `many-${testRunId()}`;
    const r = await api(
      h.apiKey,
      'POST',
      '/v1/sandboxes',
      { snapshot: snap.id, count: 3, labels: { many: 'yes' } },
      { 'idempotency-key': key },
    );
    expect(r.status).toBe(201);
    const copies = r.body.sandboxes as Array<{ id: string; labels: Record<string, string>; manifest: { snapshot: unknown } }>;
    expect(copies).toHaveLength(3);
    expect(new Set(copies.map((c) => c.id)).size).toBe(3);
    for (const [i, c] of copies.entries()) {
      expect(c.labels).toEqual({ many: 'yes' });
      expect(c.manifest.snapshot).toEqual({ id: snap.id, digest: snap.digest, parentLeaseId: parent.id });
      await exec(c.id, { cmd: `echo copy${i} > /workspace/b.txt && echo ${i} > /workspace/only${i}.txt` });
    }
    for (const [i, c] of copies.entries()) {
      const seen = await exec(c.id, { cmd: 'cat /workspace/b.txt; ls /workspace' });
      expect(seen.stdout).toBe(`copy${i}\nb.txt\nonly${i}.txt\n`);
    }
    expect((await exec(parent.id, { cmd: 'cat /workspace/b.txt; ls /workspace' })).stdout).toBe('base\nb.txt\n');

    // The same request with the same key answers the same sandboxes; a different body is a conflict.
    const again = await api(
      h.apiKey,
      'POST',
      '/v1/sandboxes',
      { snapshot: snap.id, count: 3, labels: { many: 'yes' } },
      { 'idempotency-key': key },
    );
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect((again.body.sandboxes as Array<{ id: string }>).map((c) => c.id)).toEqual(copies.map((c) => c.id));
    const changed = await api(h.apiKey, 'POST', '/v1/sandboxes', { snapshot: snap.id, count: 3 }, { 'idempotency-key': key });
    expect(changed.status).toBe(409);
    expect(changed.body.error.code).toBe('lease.idempotency_conflict');
    for (const c of copies) await h.client.releaseSandbox(c.id);
  });

  it('POST /v1/sandboxes count without snapshot, 0, negative, over SBX_FORK_MAX is 400 naming count; over the quota 429; nothing starts', async () => {
    const lease = await h.client.createSandbox();
    const snap = await h.client.snapshotSandbox(lease.id);
    made.add(snap.id);
    const before = (await h.client.listSandboxes()).map((l) => l.id);
    const bad = [
      { count: 2 },
      { snapshot: snap.id, count: 0 },
      { snapshot: snap.id, count: -1 },
      { snapshot: snap.id, count: 4 },
      { snapshot: snap.id, count: 2, env: { A: 'b' } },
    ];
    for (const body of bad) {
      const r = await api(h.apiKey, 'POST', '/v1/sandboxes', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.code).toBe('input.invalid');
      expect(JSON.stringify(r.body.error.details)).toContain('count');
    }
    const tooMany = await api(h.apiKey, 'POST', '/v1/sandboxes', { snapshot: snap.id, count: 1000 });
    expect(tooMany.status).toBe(429);
    expect(tooMany.body.error).toMatchObject({ code: 'quota.exceeded', details: { resource: 'sandboxes', requested: 1000 } });
    expect((await h.client.listSandboxes()).map((l) => l.id)).toEqual(before);
  });
});
