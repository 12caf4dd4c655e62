/**
 * Persistent volumes against a real control plane, Docker engine, Redis and the host's loop
 * devices: content kept across leases and a control-plane restart, the size enforced by the
 * kernel (ENOSPC), one writer at a time unless shared (released by release, expiry, a failed
 * create and a lost sandbox; kept across a restart), delete refused while mounted, every bad
 * input a documented 4xx with nothing made, tenants apart, the volume quota. Every volume, disk
 * image and loop device made here is removed in afterAll, also when a test failed.
 */
import { execFile } from 'node:child_process';
import { access, readdir, rmdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ErrorBody } from '../contract/errors.js';
import { isMountPoint, LoopVolumeDisks } from '../control-plane/runtime/volume-disks.js';
import { Sandbox } from '../sdk/index.js';
import { apiAs, docker, eventually, execIn, runCli, startHarness, useHarness, type Answer, type CliRun } from './fixtures/index.js';

const run = promisify(execFile);
const h = useHarness();
const api = apiAs(() => h.url);
const exec = execIn(() => h.client);
const MiB = 1024 * 1024;

/** Every volume a test asked for, by tenant key: removed in afterAll through the API, and from the host by its id whatever the API says. */
const made: Array<{ key: string; tenant: string; name: string; id: string | null }> = [];
const keys = new Map<string, string>();

async function keyOf(tenant: string): Promise<string> {
  const known = keys.get(tenant);
  if (known) return known;
  const answer = await api(h.apiKey, 'POST', '/v1/api-keys', { name: `volumes-${tenant}`, role: 'user', tenant });
  expect(answer.status).toBe(201);
  keys.set(tenant, answer.body.secret);
  return answer.body.secret;
}

async function createVolume(tenant: string, name: string, sizeBytes: number, shared?: boolean): Promise<Answer> {
  const key = await keyOf(tenant);
  const entry = { key, tenant, name, id: null as string | null };
  made.push(entry);
  const answer = await api(key, 'POST', '/v1/volumes', { name, sizeBytes, ...(shared === undefined ? {} : { shared }) });
  entry.id = await h.redis.hget(`${h.config.redisPrefix}volume:rec:${tenant}:${name}`, 'id');
  return answer;
}

async function lease(tenant: string, volumes: unknown[], extra: Record<string, unknown> = {}): Promise<Answer> {
  return api(await keyOf(tenant), 'POST', '/v1/sandboxes', { volumes, ...extra });
}

async function release(tenant: string, id: string): Promise<void> {
  expect((await api(await keyOf(tenant), 'DELETE', `/v1/sandboxes/${id}`)).status).toBe(200);
}

function codeOf(answer: Answer): string {
  return ErrorBody.parse(answer.body).error.code;
}

/** This harness's installation's volume disks (`<data dir>/volumes/<installation id>`). */
const diskRoot = (): string => `${h.config.dataDir}/volumes/${h.plane.ownership.installation}`;
const disks = (): LoopVolumeDisks => new LoopVolumeDisks(diskRoot());

async function loopDevicesOf(image: string): Promise<string> {
  return (await run('losetup', ['-j', image])).stdout.trim();
}

/** The built `sbx` CLI against the harness with the bootstrap key. */
const sbx = (args: string[]): Promise<CliRun> => runCli(h, args);

// Through the API first (the volumes this file made), then from the host whatever is left in
// this installation's directory (a test that failed half-way, a volume made by mistake).
afterAll(async () => {
  const failures: string[] = [];
  for (const entry of made) await api(entry.key, 'DELETE', `/v1/volumes/${entry.name}`).catch(() => undefined);
  const ids = new Set([...made.map((m) => m.id).filter((id): id is string => id !== null)]);
  for (const entry of await readdir(diskRoot()).catch(() => [])) ids.add(entry.replace(/\.img$/, ''));
  for (const id of ids) {
    const { image, mountPoint } = disks().paths(id);
    await disks()
      .destroy(id)
      .catch((err: unknown) => failures.push(`${id}: ${String(err)}`));
    if (await isMountPoint(mountPoint)) failures.push(`${mountPoint} still mounted`);
    if (
      await access(image).then(
        () => true,
        () => false,
      )
    )
      failures.push(`${image} still there`);
    // A lazily unmounted filesystem lets go of its loop device once its last user (a container) has.
    await eventually(
      () => loopDevicesOf(image).catch(() => ''),
      (loops) => loops === '',
      10_000,
    ).catch((err: unknown) => failures.push(`loop device left for ${image}: ${String(err)}`));
  }
  await rmdir(diskRoot()).catch((err: NodeJS.ErrnoException) => err.code === 'ENOENT' || failures.push(String(err)));
  expect(failures).toEqual([]);
});

describe('persistent volumes', () => {
  it('a file written in one lease is there in the next (also after a restart and a lost loop mount), owned by the tool user; the size is enforced (dd past it fails with ENOSPC)', async () => {
    const created = await createVolume('vola', 'cache', 32 * MiB);
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'cache', sizeBytes: 32 * MiB, shared: false, state: 'ready' });

    const first = await lease('vola', [{ name: 'cache', path: '/cache' }]);
    expect(first.status).toBe(201);
    const wrote = await exec(first.body.id, 'echo kept > /cache/file && stat -c "%u:%g" /cache /cache/file && ls -A /cache');
    expect(wrote.stdout).toBe('1000:1000\n1000:1000\nfile\n');
    // Past the size: the kernel refuses the write, the writer reads ENOSPC.
    const dd = await exec(
      first.body.id,
      'dd if=/dev/zero of=/cache/big bs=1M count=64 2>&1; echo "exit=$?"; df -B1 --output=size /cache | tail -1',
    );
    expect(dd.stdout).toContain('No space left on device');
    expect(dd.stdout).toMatch(/exit=1/);
    expect(Number(dd.stdout.trim().split('\n').pop())).toBeLessThanOrEqual(32 * MiB);
    await exec(first.body.id, 'rm /cache/big');
    await release('vola', first.body.id);

    // A control-plane restart in between changes nothing: the disk and its mount stay. A host
    // reboot loses the loop mount (undone here by hand): the next lease that needs it mounts it again.
    await h.restart();
    const id = made.find((m) => m.name === 'cache')!.id!;
    await run('umount', [disks().paths(id).mountPoint]);
    expect(await isMountPoint(disks().paths(id).mountPoint)).toBe(false);
    const second = await lease('vola', [{ name: 'cache', path: '/data/cache' }]);
    expect(second.status).toBe(201);
    expect((await exec(second.body.id, 'cat /data/cache/file')).stdout).toBe('kept\n');
    await release('vola', second.body.id);

    const audit = await api(h.apiKey, 'GET', '/v1/audit?action=volume.create');
    expect(audit.body.entries.some((e: { details: { name: string } }) => e.details.name === 'cache')).toBe(true);
  });

  it("one writer at a time: a second read-write mount is 409 volume.writer_conflict with nothing made; readers see the writer's files at once and cannot write", async () => {
    expect((await createVolume('vola', 'single', 16 * MiB)).status).toBe(201);
    const writer = await lease('vola', [{ name: 'single', path: '/vol' }]);
    expect(writer.status).toBe(201);
    const before = (await api(await keyOf('vola'), 'GET', '/v1/sandboxes')).body.sandboxes.length;

    const second = await lease('vola', [{ name: 'single', path: '/vol' }]);
    expect(second.status).toBe(409);
    expect(codeOf(second)).toBe('volume.writer_conflict');
    expect(ErrorBody.parse(second.body).error.details).toMatchObject({ name: 'single', leaseId: writer.body.id });
    expect((await api(await keyOf('vola'), 'GET', '/v1/sandboxes')).body.sandboxes.length).toBe(before);

    const reader = await lease('vola', [{ name: 'single', path: '/vol', readOnly: true }]);
    expect(reader.status).toBe(201);
    await exec(writer.body.id, 'echo live > /vol/now');
    expect((await exec(reader.body.id, 'cat /vol/now')).stdout).toBe('live\n');
    expect((await exec(reader.body.id, 'touch /vol/x 2>&1')).stdout).toContain('Read-only file system');
    const shown = await api(await keyOf('vola'), 'GET', '/v1/volumes/single');
    expect(shown.body.mounts).toEqual(
      expect.arrayContaining([
        { leaseId: writer.body.id, readOnly: false },
        { leaseId: reader.body.id, readOnly: true },
      ]),
    );

    // The lock lives in Redis: a restarted control plane still refuses a second writer.
    await h.restart();
    expect(codeOf(await lease('vola', [{ name: 'single', path: '/vol' }]))).toBe('volume.writer_conflict');

    await release('vola', writer.body.id);
    const next = await lease('vola', [{ name: 'single', path: '/vol' }]);
    expect(next.status).toBe(201);
    await release('vola', next.body.id);
    await release('vola', reader.body.id);
  });

  it('concurrent read-write creates on one volume: exactly one wins, the others are 409 with nothing made', async () => {
    expect((await createVolume('vola', 'race', 16 * MiB)).status).toBe(201);
    const key = await keyOf('vola');
    const before = (await api(key, 'GET', '/v1/sandboxes')).body.sandboxes.length;
    const answers = await Promise.all([1, 2, 3].map(() => lease('vola', [{ name: 'race', path: '/vol' }])));
    const won = answers.filter((a) => a.status === 201);
    expect(won).toHaveLength(1);
    for (const lost of answers.filter((a) => a.status !== 201))
      expect([lost.status, codeOf(lost)]).toEqual([409, 'volume.writer_conflict']);
    expect((await api(key, 'GET', '/v1/sandboxes')).body.sandboxes.length).toBe(before + 1);
    expect((await api(key, 'GET', '/v1/volumes/race')).body.mounts).toEqual([{ leaseId: won[0]!.body.id, readOnly: false }]);
    await release('vola', won[0]!.body.id);
  });

  it('the writer lock goes with the lease whichever way it ends: expiry, a lost container, a failed create', async () => {
    expect((await createVolume('vola', 'locks', 16 * MiB)).status).toBe(201);
    const mount = [{ name: 'locks', path: '/vol' }];

    const expiring = await lease('vola', mount, { ttlSeconds: 2 });
    expect(expiring.status).toBe(201);
    await eventually(
      async () => (await api(await keyOf('vola'), 'GET', `/v1/sandboxes/${expiring.body.id}`)).body.status,
      (status) => status === 'expired',
    );
    const afterExpiry = await lease('vola', mount);
    expect(afterExpiry.status).toBe(201);

    await docker('kill', `sbx-${afterExpiry.body.id}`);
    await eventually(
      async () => (await api(await keyOf('vola'), 'GET', `/v1/sandboxes/${afterExpiry.body.id}`)).body.status,
      (status) => status === 'lost',
    );
    // A lease whose container cannot start (the volume's directory bound over a file of the
    // image) fails after its hold was taken: the hold goes with it.
    const failed = await lease('vola', [{ name: 'locks', path: '/etc/passwd' }]);
    expect([failed.status, codeOf(failed)]).toEqual([503, 'lease.create_failed']);
    const afterFailure = await lease('vola', mount);
    expect(afterFailure.status).toBe(201);
    expect((await api(await keyOf('vola'), 'GET', '/v1/volumes/locks')).body.mounts).toEqual([
      { leaseId: afterFailure.body.id, readOnly: false },
    ]);
    await release('vola', afterFailure.body.id);
  });

  it("a shared volume takes two writers at once, each seeing the other's files", async () => {
    expect((await createVolume('vola', 'shared', 16 * MiB, true)).status).toBe(201);
    const a = await lease('vola', [{ name: 'shared', path: '/shared' }]);
    const b = await lease('vola', [{ name: 'shared', path: '/shared' }]);
    expect([a.status, b.status]).toEqual([201, 201]);
    await exec(a.body.id, 'echo from-a > /shared/a');
    await exec(b.body.id, 'echo from-b > /shared/b');
    expect((await exec(a.body.id, 'cat /shared/b')).stdout).toBe('from-b\n');
    expect((await exec(b.body.id, 'cat /shared/a')).stdout).toBe('from-a\n');
    await release('vola', a.body.id);
    await release('vola', b.body.id);
  });

  it('delete is refused while a live lease has the volume mounted, then removes its disk, loop device and record', async () => {
    const created = await createVolume('vola', 'doomed', 16 * MiB);
    expect(created.status).toBe(201);
    const id = made.find((m) => m.name === 'doomed')!.id!;
    const { image, mountPoint } = disks().paths(id);
    expect(await loopDevicesOf(image)).not.toBe('');
    const reader = await lease('vola', [{ name: 'doomed', path: '/vol', readOnly: true }]);
    expect(reader.status).toBe(201);

    const refused = await api(await keyOf('vola'), 'DELETE', '/v1/volumes/doomed');
    expect(refused.status).toBe(409);
    expect(codeOf(refused)).toBe('volume.in_use');
    expect(ErrorBody.parse(refused.body).error.details).toMatchObject({ leases: [reader.body.id] });

    await release('vola', reader.body.id);
    const deleted = await api(await keyOf('vola'), 'DELETE', '/v1/volumes/doomed');
    expect(deleted.status).toBe(200);
    expect(codeOf(await api(await keyOf('vola'), 'GET', '/v1/volumes/doomed'))).toBe('volume.not_found');
    expect(await isMountPoint(mountPoint)).toBe(false);
    await expect(access(image)).rejects.toThrow();
    await eventually(
      () => loopDevicesOf(image),
      (loops) => loops === '',
    );
    const audit = await api(h.apiKey, 'GET', `/v1/audit?action=volume.delete&target=volume:${id}`);
    expect(audit.body.entries).toHaveLength(1);
  });

  it("tenants never meet: another tenant's volume is 404 to read, delete or mount, and it may use the same name", async () => {
    expect((await createVolume('vola', 'private', 16 * MiB)).status).toBe(201);
    const other = await keyOf('volb');
    expect(codeOf(await api(other, 'GET', '/v1/volumes/private'))).toBe('volume.not_found');
    expect(codeOf(await api(other, 'DELETE', '/v1/volumes/private'))).toBe('volume.not_found');
    const mounted = await lease('volb', [{ name: 'private', path: '/vol' }]);
    expect(mounted.status).toBe(404);
    expect(codeOf(mounted)).toBe('volume.not_found');
    expect((await api(other, 'GET', '/v1/volumes')).body.volumes).toEqual([]);

    expect((await createVolume('volb', 'private', 16 * MiB)).status).toBe(201);
    const b = await lease('volb', [{ name: 'private', path: '/vol' }]);
    expect(b.status).toBe(201);
    // Its own, empty: nothing of vola's volume shows.
    expect((await exec(b.body.id, 'ls -A /vol')).stdout).toBe('');
    await release('volb', b.body.id);
    expect((await api(await keyOf('vola'), 'GET', '/v1/volumes')).body.volumes.map((v: { name: string }) => v.name)).toContain('private');
  });

  it('bad input is a documented 4xx each, and nothing is made', async () => {
    expect((await createVolume('vola', 'inputs', 16 * MiB)).status).toBe(201);
    expect((await createVolume('vola', 'inputs2', 16 * MiB)).status).toBe(201);
    const key = await keyOf('vola');
    const sandboxesBefore = (await api(key, 'GET', '/v1/sandboxes')).body.sandboxes.length;
    const volumesBefore = (await api(key, 'GET', '/v1/volumes')).body;

    const creates: Array<[unknown, number, string]> = [
      [{ name: 'z0', sizeBytes: 0 }, 400, 'volume.size_out_of_range'],
      [{ name: 'z1', sizeBytes: -1 }, 400, 'volume.size_out_of_range'],
      [{ name: 'z2', sizeBytes: 1024 }, 400, 'volume.size_out_of_range'],
      [{ name: 'z3', sizeBytes: Number.MAX_SAFE_INTEGER }, 400, 'volume.size_out_of_range'],
      [{ name: 'z4', sizeBytes: 1e300 }, 400, 'input.invalid'],
      [{ name: 'z5', sizeBytes: 16 * MiB + 0.5 }, 400, 'input.invalid'],
      [{ name: 'Bad/Name', sizeBytes: 16 * MiB }, 400, 'input.invalid'],
      [{ name: '../etc', sizeBytes: 16 * MiB }, 400, 'input.invalid'],
      [{ name: 'inputs', sizeBytes: 16 * MiB }, 409, 'volume.exists'],
    ];
    for (const [body, status, code] of creates) {
      const answer = await api(key, 'POST', '/v1/volumes', body);
      expect({ body, status: answer.status, code: codeOf(answer) }).toEqual({ body, status, code });
    }

    const mounts: Array<[unknown[], number, string]> = [
      [
        [
          { name: 'inputs', path: '/a' },
          { name: 'inputs', path: '/b' },
        ],
        400,
        'volume.mounted_twice',
      ],
      [[{ name: 'inputs', path: '/' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/proc' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/sys/fs' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/dev' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/run/sbx' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/run' }], 400, 'volume.mount_path_reserved'],
      [[{ name: 'inputs', path: '/workspace' }], 400, 'volume.mount_path_conflict'],
      [[{ name: 'inputs', path: '/workspace/deps' }], 400, 'volume.mount_path_conflict'],
      [[{ name: 'inputs', path: '/tmp' }], 400, 'volume.mount_path_conflict'],
      [[{ name: 'inputs', path: '/home' }], 400, 'volume.mount_path_conflict'],
      [
        [
          { name: 'inputs', path: '/data' },
          { name: 'inputs2', path: '/data/inner' },
        ],
        400,
        'volume.mount_path_conflict',
      ],
      [[{ name: 'inputs', path: 'data' }], 400, 'input.invalid'],
      [[{ name: 'inputs', path: '/data/../etc' }], 400, 'input.invalid'],
      [[{ name: 'inputs', path: '/data/' }], 400, 'input.invalid'],
      [[{ name: 'nosuch', path: '/data' }], 404, 'volume.not_found'],
    ];
    for (const [volumes, status, code] of mounts) {
      const answer = await lease('vola', volumes);
      expect({ volumes, status: answer.status, code: codeOf(answer) }).toEqual({ volumes, status, code });
    }
    expect((await api(key, 'GET', '/v1/sandboxes')).body.sandboxes.length).toBe(sandboxesBefore);
    expect((await api(key, 'GET', '/v1/volumes')).body).toEqual(volumesBefore);
    for (const name of ['inputs', 'inputs2']) expect((await api(key, 'GET', `/v1/volumes/${name}`)).body.mounts).toEqual([]);
  });

  it("the tenant quota maxVolumeBytes counts every volume's size: over it is 429 quota.exceeded, a delete gives the bytes back", async () => {
    expect((await api(h.apiKey, 'PUT', '/v1/tenants/volq/quota', { maxVolumeBytes: 40 * MiB })).status).toBe(200);
    expect((await createVolume('volq', 'one', 32 * MiB)).status).toBe(201);
    const over = await createVolume('volq', 'two', 16 * MiB);
    expect(over.status).toBe(429);
    expect(ErrorBody.parse(over.body).error).toMatchObject({
      code: 'quota.exceeded',
      details: { tenant: 'volq', resource: 'volumeBytes', limit: 40 * MiB, used: 32 * MiB, requested: 16 * MiB },
    });
    const listed = await api(await keyOf('volq'), 'GET', '/v1/volumes');
    expect(listed.body).toMatchObject({ usedBytes: 32 * MiB, limitBytes: 40 * MiB });
    expect((await api(await keyOf('volq'), 'DELETE', '/v1/volumes/one')).status).toBe(200);
    expect((await createVolume('volq', 'two', 16 * MiB)).status).toBe(201);
  });

  it('the SDK (client.volumes, Sandbox.create({volumes})) and the CLI (sbx volume, --volume NAME:PATH[:ro]) reach the same volumes', async () => {
    made.push(
      { key: h.apiKey, tenant: 'default', name: 'sdkvol', id: null },
      { key: h.apiKey, tenant: 'default', name: 'clivol', id: null },
    );
    const created = await h.client.volumes.create({ name: 'sdkvol', sizeBytes: 16 * MiB });
    expect(created).toMatchObject({ name: 'sdkvol', state: 'ready' });
    {
      await using sandbox = await Sandbox.create({ url: h.url, apiKey: h.apiKey, volumes: [{ name: 'sdkvol', path: '/v' }] });
      expect((await sandbox.exec('echo sdk > /v/f && cat /v/f')).stdout).toBe('sdk\n');
      expect((await h.client.volumes.get('sdkvol')).mounts).toEqual([{ leaseId: sandbox.id, readOnly: false }]);
    }
    expect((await h.client.volumes.list()).volumes.map((v) => v.name)).toContain('sdkvol');
    await h.client.volumes.delete('sdkvol');
    await expect(h.client.volumes.get('sdkvol')).rejects.toMatchObject({ code: 'volume.not_found' });

    expect(await sbx(['volume', 'create', 'clivol', '--size', '16M'])).toMatchObject({ code: 0, stdout: 'clivol\n' });
    expect((await sbx(['volume', 'ls'])).stdout).toMatch(/^clivol {2}16777216 bytes {2}one writer {2}ready/m);
    expect((await sbx(['run', '--volume', 'clivol:/v', '--', 'echo cli > /v/f'])).code).toBe(0);
    const read = await sbx(['run', '--volume', 'clivol:/v:ro', '--', 'cat /v/f; touch /v/g']);
    expect(read.stdout).toContain('cli\n');
    expect(read.stdout + read.stderr).toContain('Read-only file system');
    const bad = await sbx(['run', '--volume', 'clivol:/proc', '--', 'true']);
    expect(bad.code).toBe(125);
    expect(bad.stderr).toContain('volume.mount_path_reserved');
    expect((await sbx(['volume', 'rm', 'clivol'])).code).toBe(0);
    expect((await sbx(['volume', 'ls'])).stdout).not.toContain('clivol');
  });

  it('beside a warm pool, a lease with volumes starts cold (a pooled container has no mounts) and gets them', async () => {
    const pooled = await startHarness({ SBX_WARM_POOLS: JSON.stringify([{ policy: 'default', min: 1, max: 1 }]) });
    try {
      const readyIds = (): Promise<string[]> =>
        pooled.redis.lrange(`${pooled.config.redisPrefix}pool:default@${pooled.config.image}:ready`, 0, -1);
      const warm = await eventually(readyIds, (ids) => ids.length === 1, 90_000);
      await pooled.client.volumes.create({ name: 'beside-pool', sizeBytes: 16 * MiB });
      const lease = await pooled.client.createSandbox({ volumes: [{ name: 'beside-pool', path: '/vol' }] });
      expect(warm).not.toContain(lease.id);
      expect(await readyIds()).toEqual(warm);
      const wrote = await execIn(() => pooled.client)(lease.id, 'echo cold > /vol/f && cat /vol/f');
      expect(wrote.stdout).toBe('cold\n');
      await pooled.client.releaseSandbox(lease.id);
      await pooled.client.volumes.delete('beside-pool');
    } finally {
      // The disk is removed by the delete above; if the test failed before it, by the run's teardown.
      await pooled.close();
    }
  });

  it('disks: concurrent mounts of an unmounted volume (two creates after a reboot) attach one loop device, never two', async () => {
    const id = 'vol_00000000000000race';
    const [one, two] = [disks(), disks()];
    await one.create(id, 16 * MiB);
    const { image, mountPoint } = one.paths(id);
    await run('umount', [mountPoint]);
    await Promise.all([one.ensureMounted(id), two.ensureMounted(id), one.ensureMounted(id), two.ensureMounted(id)]);
    expect((await loopDevicesOf(image)).split('\n')).toHaveLength(1);
    const mounts = (await run('grep', ['-c', ` ${mountPoint} `, '/proc/self/mountinfo'])).stdout.trim();
    expect(mounts).toBe('1');
    await one.destroy(id);
    expect(await isMountPoint(mountPoint)).toBe(false);
  });
});
