/**
 * Writable roots keep the image's content (issue 12 part 3): a root starts with what the image
 * has at its path, owned by the tool user, size-limited; a lease adds roots of its own within
 * its policy's `leaseWritableRoots`; each refusal has its code and leaves nothing behind.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImageSource } from '../control-plane/runtime/image-source.js';
import { REPO_ROOT, apiAs, buildImage, containersOf, docker, execIn, testRunId, useHarness } from './fixtures/index.js';

const h = useHarness();
const exec = execIn(() => h.client);
const api = apiAs(() => h.url);
const MiB = 1024 * 1024;

/** An image FROM this checkout's sandbox image with a repository at /testbed (root-owned, as SWE-bench images have it). */
const image = `sbx-test-roots-${testRunId()}:testbed`;

beforeAll(async () => {
  const base = (await readFile(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8')).trim();
  const context = await mkdtemp(join(tmpdir(), 'sbx-roots-'));
  try {
    await writeFile(
      join(context, 'Dockerfile'),
      [
        `FROM ${base}`,
        'USER root',
        'RUN mkdir -p /testbed/pkg /workspace /opt/big /usr/local/share/roots \\',
        ' && printf "hello from the image\\n" > /testbed/README.md \\',
        ' && printf "x = 1\\n" > /testbed/pkg/mod.py \\',
        ' && chmod 0644 /testbed/README.md /testbed/pkg/mod.py && chown -R root:root /testbed \\',
        ' && printf "seeded\\n" > /workspace/from-image.txt \\',
        ' && head -c 3145728 /dev/zero > /opt/big/blob',
      ].join('\n'),
    );
    await docker('build', '-q', '-t', image, context);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
}, 120_000);

afterAll(async () => {
  await docker('rmi', '-f', image).catch(() => undefined);
});

describe('writable roots start with the image content', () => {
  it('a lease root at /testbed shows the image files, owned and writable by the tool user; the manifest records every root', async () => {
    const lease = await h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 8 * MiB }] });
    const r = await exec(lease.id, {
      cmd: 'cat /testbed/README.md /testbed/pkg/mod.py; echo more >> /testbed/README.md && touch /testbed/pkg/new.py && echo wrote; stat -c "%U %a" /testbed/README.md /testbed/pkg; id -un; df -B1 --output=size /testbed | tail -1 | tr -d " "',
    });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toBe(`hello from the image\nx = 1\nwrote\nsandbox 644\nsandbox 755\nsandbox\n${8 * MiB}\n`);
    expect(lease.manifest!.writableRoots).toEqual([
      { path: '/workspace', sizeBytes: 1024 * MiB, kind: 'volume', source: 'policy', fromImage: true },
      // The image has nothing in /tmp: it starts empty.
      { path: '/tmp', sizeBytes: 512 * MiB, kind: 'tmpfs', source: 'policy', fromImage: false },
      { path: '/home/sandbox', sizeBytes: 256 * MiB, kind: 'tmpfs', source: 'policy', fromImage: expect.any(Boolean) },
      { path: '/testbed', sizeBytes: 8 * MiB, kind: 'volume', source: 'lease', fromImage: true },
    ]);
    // The files API reaches a lease root like a policy volume root.
    const download = await h.client.raw('GET', `/v1/sandboxes/${lease.id}/files?path=/testbed/pkg/mod.py`);
    expect(download.status).toBe(200);
    expect(containersOf(h.config.owner)).resolves.not.toContain(`sbx-${lease.id}-seed`);
  });

  it('/workspace keeps what the image has there, writable by the tool user', async () => {
    const lease = await h.client.createSandbox({ image });
    const r = await exec(lease.id, {
      cmd: 'cat /workspace/from-image.txt && echo changed > /workspace/from-image.txt && cat /workspace/from-image.txt',
    });
    expect(r.stdout).toBe('seeded\nchanged\n');
  });

  it('the root keeps its size limit: a write past it is resource.disk_full', async () => {
    const lease = await h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 2 * MiB }] });
    const r = await exec(lease.id, { cmd: 'head -c 4194304 /dev/zero > /testbed/fill' });
    expect(r.status).toBe('failed');
    expect(r.error?.code).toBe('resource.disk_full');
  });

  it('image content larger than the root is 422 lease.writable_root_full, and nothing is left behind', async () => {
    const before = await containersOf(h.config.owner);
    const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { image, writableRoots: [{ path: '/opt/big', sizeBytes: 2 * MiB }] });
    expect(answer.status, JSON.stringify(answer.body)).toBe(422);
    expect(answer.body.error).toMatchObject({ code: 'lease.writable_root_full', details: { path: '/opt/big', sizeBytes: 2 * MiB } });
    expect(await containersOf(h.config.owner)).toEqual(before);
    const volumes = await docker('volume', 'ls', '-q', '--filter', `label=sbx.owner=${h.config.owner}`);
    const leases = await h.client.listSandboxes();
    const live = new Set(leases.filter((l) => l.status === 'ready').map((l) => l.id));
    expect(volumes.split('\n').filter((v) => v && ![...live].some((id) => v.startsWith(`sbx-${id}-`)))).toEqual([]);
  });

  it('an image with a symbolic link at or above a root path (/testbed -> /etc, /home/esc -> /) is 422 image.mount_path_symlink (was a writable /etc, or a 503 from runc), nothing left', async () => {
    const base = (await readFile(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8')).trim();
    const linked = `sbx-test-roots-${testRunId()}:links`;
    const context = await mkdtemp(join(tmpdir(), 'sbx-roots-'));
    try {
      await writeFile(
        join(context, 'Dockerfile'),
        [`FROM ${base}`, 'USER root', 'RUN ln -s /etc /testbed && mkdir -p /home && ln -s / /home/esc'].join('\n'),
      );
      await docker('build', '-q', '-t', linked, context);
      const before = await containersOf(h.config.owner);
      for (const [path, linkPath] of [
        ['/testbed', '/testbed'],
        ['/home/esc', '/home/esc'],
        // Again: refused from what the first refusal recorded for the image.
        ['/testbed', '/testbed'],
      ] as const) {
        const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { image: linked, writableRoots: [{ path }] });
        expect(answer.status, JSON.stringify(answer.body)).toBe(422);
        expect(answer.body.error).toMatchObject({ code: 'image.mount_path_symlink', details: { path: linkPath, mountPath: path } });
      }
      // A recorded link refuses without a look at the image, also with paths never checked (/opt/new).
      const since = Date.now() / 1000;
      const again = await api(h.apiKey, 'POST', '/v1/sandboxes', {
        image: linked,
        writableRoots: [
          { path: '/testbed', sizeBytes: 8 * MiB },
          { path: '/opt/new', sizeBytes: 8 * MiB },
        ],
      });
      expect(again.body.error).toMatchObject({ code: 'image.mount_path_symlink', details: { path: '/testbed' } });
      const sources = await docker(
        'events',
        ...[
          '--since',
          since.toFixed(3),
          '--until',
          (Date.now() / 1000 + 1).toFixed(3),
          '--filter',
          'type=container',
          '--filter',
          'event=create',
        ],
        ...['--filter', `label=sbx.owner=${h.config.owner}`, '--filter', 'label=sbx.role=seed', '--format', '{{.Actor.Attributes.name}}'],
      );
      expect(sources.split('\n').filter(Boolean)).toEqual([]);
      expect(await containersOf(h.config.owner)).toEqual(before);
      const volumes = await docker('volume', 'ls', '-q', '--filter', `label=sbx.owner=${h.config.owner}`);
      const live = new Set((await h.client.listSandboxes()).filter((l) => l.status === 'ready').map((l) => l.id));
      expect(volumes.split('\n').filter((v) => v && ![...live].some((id) => v.startsWith(`sbx-${id}-`)))).toEqual([]);
    } finally {
      await docker('rmi', '-f', linked).catch(() => undefined);
      await rm(context, { recursive: true, force: true });
    }
  });

  it('a later lease of an image reads nothing from it (no container but its own), and its roots still hold the image content', async () => {
    // The first lease of the image in this control plane records what it read (or an earlier test did).
    await h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 4 * MiB }] });
    const since = Date.now() / 1000;
    const later = await h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 4 * MiB }] });
    const until = Date.now() / 1000 + 1;
    const created = await docker(
      'events',
      ...['--since', since.toFixed(3), '--until', until.toFixed(3), '--filter', `label=sbx.lease=${later.id}`],
      ...['--filter', 'type=container', '--filter', 'event=create', '--format', '{{.Actor.Attributes.name}}'],
    );
    expect(created.split('\n').filter(Boolean)).toEqual([`sbx-${later.id}`]);
    const r = await exec(later.id, { cmd: 'cat /testbed/README.md /workspace/from-image.txt; stat -c "%U" /testbed/pkg/mod.py' });
    expect(r.stdout).toBe('hello from the image\nseeded\nsandbox\n');
    expect(later.manifest!.writableRoots.filter((r) => r.fromImage).map((r) => r.path)).toEqual(
      expect.arrayContaining(['/workspace', '/testbed']),
    );
    expect(later.manifest!.writableRoots.find((r) => r.path === '/tmp')?.fromImage).toBe(false);
  });

  it('six first leases of a new image at once read each part of it once (its links, each root), not once a lease, and all hold its content', async () => {
    const base = (await readFile(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8')).trim();
    // Content of this run alone: an image ID no control plane has read before.
    const fresh = await buildImage(
      'roots-fresh',
      [`FROM ${base}`, 'USER root', `RUN mkdir -p /workspace && printf "${testRunId()}\\n" > /workspace/run.txt`].join('\n'),
    );
    try {
      const since = Date.now() / 1000;
      const leases = await Promise.all([1, 2, 3, 4, 5, 6].map(() => h.client.createSandbox({ image: fresh })));
      const until = Date.now() / 1000 + 1;
      const created = await docker(
        'events',
        ...['--since', since.toFixed(3), '--until', until.toFixed(3), '--filter', 'type=container', '--filter', 'event=create'],
        ...['--filter', 'label=sbx.role=seed', '--format', '{{index .Actor.Attributes "sbx.lease"}}'],
      );
      const ids = new Set(leases.map((l) => l.id));
      // One lease reads the mount paths' links while the others wait; then each root is read by
      // whichever lease gets there first: a source container for each part at most, not one a lease.
      const imageRoots = leases[0]!.manifest!.writableRoots.length;
      const sources = created.split('\n').filter((id) => ids.has(id));
      expect(sources.length).toBeGreaterThanOrEqual(1);
      expect(sources.length).toBeLessThanOrEqual(Math.min(1 + imageRoots, leases.length - 1));
      for (const lease of leases) expect((await exec(lease.id, { cmd: 'cat /workspace/run.txt' })).stdout).toBe(`${testRunId()}\n`);
      await Promise.all(leases.map((l) => h.client.releaseSandbox(l.id)));
    } finally {
      await docker('rmi', '-f', fresh).catch(() => undefined);
    }
  });

  it('two leases of the same image do not share writes in their roots', async () => {
    const [a, b] = await Promise.all([
      h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 4 * MiB }] }),
      h.client.createSandbox({ image, writableRoots: [{ path: '/testbed', sizeBytes: 4 * MiB }] }),
    ]);
    await exec(a.id, { cmd: 'echo a-only > /testbed/README.md && echo a > /workspace/a.txt' });
    const r = await exec(b.id, { cmd: 'cat /testbed/README.md; ls /workspace' });
    expect(r.stdout).toBe('hello from the image\nfrom-image.txt\n');
  });
});

describe('the image source container', () => {
  it('one that vanished while the image was read is not taken for an image with nothing there (lease.create_failed)', async () => {
    const source = new ImageSource(new Docker({ socketPath: h.config.dockerSocket }), {
      leaseId: `sbx_${testRunId()}vanish`,
      image,
      ownership: { owner: h.config.owner, installation: 'inst_test-vanish' },
    });
    try {
      const container = await source.get();
      await source.confirm();
      await docker('rm', '-f', container.id);
      // What a read through it now answers: 404, as for a path the image lacks.
      await expect(container.infoArchive({ path: '/testbed' })).rejects.toMatchObject({ statusCode: 404 });
      await expect(source.confirm()).rejects.toMatchObject({ code: 'lease.create_failed' });
    } finally {
      await source.remove();
    }
    await expect(source.get()).rejects.toThrow('was removed');
  });
});

describe('lease writable roots that are refused', () => {
  const refused: Array<[string, number, string, string | undefined, unknown]> = [
    ['relative path', 400, 'lease.writable_root_invalid', 'not_absolute', [{ path: 'testbed' }]],
    ['.. segments', 400, 'lease.writable_root_invalid', 'not_normal', [{ path: '/home/x/../../etc' }]],
    ['/proc', 400, 'lease.writable_root_invalid', 'reserved', [{ path: '/proc' }]],
    ['/sys below', 400, 'lease.writable_root_invalid', 'reserved', [{ path: '/sys/fs' }]],
    ['/dev', 400, 'lease.writable_root_invalid', 'reserved', [{ path: '/dev' }]],
    ['/run/sbx', 400, 'lease.writable_root_invalid', 'reserved', [{ path: '/run/sbx' }]],
    ['the root', 400, 'lease.writable_root_invalid', 'reserved', [{ path: '/' }]],
    ['twice', 400, 'lease.writable_root_invalid', 'duplicate', [{ path: '/testbed' }, { path: '/testbed' }]],
    ['over a policy root', 400, 'lease.writable_root_invalid', 'overlap', [{ path: '/workspace' }]],
    ['under a policy root', 400, 'lease.writable_root_invalid', 'overlap', [{ path: '/home/sandbox/x' }]],
    ['a path the policy does not allow', 403, 'policy.writable_root_denied', undefined, [{ path: '/etc' }]],
    ['over the rule size', 400, 'lease.writable_root_too_large', undefined, [{ path: '/testbed', sizeBytes: 512 * MiB }]],
  ];
  it.each(refused)('%s: %i %s, nothing created', async (_name, status, code, reason, writableRoots) => {
    const before = await containersOf(h.config.owner);
    const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { writableRoots });
    expect(answer.status).toBe(status);
    expect(answer.body.error.code).toBe(code);
    if (reason) expect(answer.body.error.details.reason).toBe(reason);
    expect(await containersOf(h.config.owner)).toEqual(before);
  });
});
