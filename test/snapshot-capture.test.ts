/**
 * How a snapshot is captured (issue 12 part 5, control-plane/runtime/snapshot-image.ts and
 * snapshot-roots.ts) against the real engine: the writable roots are tar archives on the host
 * beside the snapshot image, and go with it; a file the tool user cannot read fails the capture
 * and nothing is left; and the tenant's byte quota holds when two captures race for it.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { apiAs, docker, execIn, useHarness } from './fixtures/index.js';

const MiB = 1024 * 1024;
// Room for one snapshot of 5 MiB of data, not two.
const h = useHarness({ SBX_SNAPSHOT_QUOTA_BYTES: String(8 * MiB) });
const exec = execIn(() => h.client);
const api = apiAs(() => h.url);

/** Where this installation keeps snapshots' roots. */
const snapshotDir = (): string => join(h.config.dataDir, 'snapshots', h.plane.ownership.installation);

/** Engine refs of the snapshot images made of lease `leaseId` (by label). */
async function imagesOf(leaseId: string): Promise<string[]> {
  const out = await docker('images', '--filter', `label=sbx.snapshot.parent=${leaseId}`, '--format', '{{.Repository}}:{{.Tag}}');
  return out.split('\n').filter(Boolean);
}

afterAll(async () => {
  for (const lease of await h.client.listSandboxes().catch(() => [])) {
    await h.client.releaseSandbox(lease.id).catch(() => undefined);
    for (const ref of await imagesOf(lease.id).catch(() => [])) await docker('rmi', '-f', ref).catch(() => undefined);
  }
  for (const s of await h.client.listSnapshots().catch(() => [])) await h.client.deleteSnapshot(s.id).catch(() => undefined);
});

describe('snapshot capture', () => {
  it('the writable roots are archives beside the snapshot image, the digest covers them, and both go when it is deleted', async () => {
    const lease = await h.client.createSandbox();
    try {
      await exec(lease.id, { cmd: 'echo one > /workspace/a.txt && echo tmp > /tmp/t.txt' });
      const first = await h.client.snapshotSandbox(lease.id);
      const [ref] = await imagesOf(lease.id);
      const hex = ref!.slice('sbx-snapshot:'.length);
      const imageId = (await docker('image', 'inspect', '--format', '{{.Id}}', ref!)).trim();
      expect(imageId).toBe(`sha256:${hex}`);
      expect(first.digest).not.toBe(imageId);
      const archives = await readdir(join(snapshotDir(), hex));
      expect(archives.sort()).toEqual(['%2Fhome%2Fsandbox.tar', '%2Ftmp.tar', '%2Fworkspace.tar']);

      // Other content, another digest; the same sandbox otherwise.
      await exec(lease.id, { cmd: 'echo two > /workspace/a.txt' });
      const second = await h.client.snapshotSandbox(lease.id);
      expect(second.digest).not.toBe(first.digest);
      const child = await h.client.createSandbox({ snapshot: first.id });
      expect((await exec(child.id, { cmd: 'cat /workspace/a.txt /tmp/t.txt' })).stdout).toBe('one\ntmp\n');
      await h.client.releaseSandbox(child.id);

      for (const s of [first, second]) await h.client.deleteSnapshot(s.id);
      expect(await imagesOf(lease.id)).toEqual([]);
      expect(await readdir(snapshotDir())).not.toContain(hex);
    } finally {
      await h.client.releaseSandbox(lease.id).catch(() => undefined);
    }
  });

  it('a file the tool user cannot read fails the capture (422 snapshot.capture_failed, naming the root); nothing is left', async () => {
    const lease = await h.client.createSandbox();
    try {
      await exec(lease.id, { cmd: 'echo x > /workspace/locked && chmod 000 /workspace/locked' });
      const refused = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/snapshots`, {});
      expect(refused.status, JSON.stringify(refused.body)).toBe(422);
      expect(refused.body.error).toMatchObject({ code: 'snapshot.capture_failed', details: { path: '/workspace' } });
      expect(refused.body.error.message).toContain('Permission denied');
      expect(await imagesOf(lease.id)).toEqual([]);
      expect((await readdir(snapshotDir()).catch(() => [])).filter((e) => e.startsWith('.capture-'))).toEqual([]);
      expect(await h.client.listSnapshots()).toEqual([]);
      // Its reservation went too: the same sandbox, readable again, fits.
      await exec(lease.id, { cmd: 'chmod 644 /workspace/locked' });
      const snap = await h.client.snapshotSandbox(lease.id);
      await h.client.deleteSnapshot(snap.id);
    } finally {
      await h.client.releaseSandbox(lease.id).catch(() => undefined);
    }
  });

  it('two snapshots at once, each within the byte quota but not both: one is taken, the other is 429 and leaves nothing', async () => {
    const lease = await h.client.createSandbox();
    try {
      await exec(lease.id, { cmd: `head -c ${5 * MiB} /dev/urandom > /workspace/data.bin` });
      const answers = await Promise.all([1, 2].map(() => api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/snapshots`, {})));
      expect(answers.map((a) => a.status).sort(), JSON.stringify(answers.map((a) => a.body))).toEqual([201, 429]);
      const refused = answers.find((a) => a.status === 429)!;
      expect(refused.body.error).toMatchObject({ code: 'quota.exceeded', details: { resource: 'snapshotBytes', limit: 8 * MiB } });
      const taken = answers.find((a) => a.status === 201)!.body as { id: string; sizeBytes: number };
      expect(taken.sizeBytes).toBeGreaterThanOrEqual(5 * MiB);
      expect((await h.client.listSnapshots()).map((s) => s.id)).toEqual([taken.id]);
      expect(await imagesOf(lease.id)).toHaveLength(1);
      // Once it is deleted, the quota is free again.
      await h.client.deleteSnapshot(taken.id);
      const again = await h.client.snapshotSandbox(lease.id);
      await h.client.deleteSnapshot(again.id);
    } finally {
      await h.client.releaseSandbox(lease.id).catch(() => undefined);
    }
  });
});
