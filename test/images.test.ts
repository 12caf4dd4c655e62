/**
 * Images: pulled on demand from an allowlisted registry (a local `docker-registry` on loopback),
 * and built through `POST /v1/images` (offline, FROM this checkout's sandbox image).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ImageEvent } from '../contract/images.js';
import { SbxClient } from '../sdk/index.js';
import {
  apiAs,
  containersOf,
  docker,
  execIn,
  runCli,
  startRegistry,
  testRunId,
  useHarness,
  type Harness,
  type LocalRegistry,
} from './fixtures/index.js';

let registry: LocalRegistry;
const h: Harness = useHarness(async () => {
  registry = await startRegistry();
  return {
    SBX_IMAGE_REGISTRIES: registry.host,
    SBX_IMAGE_BUILD_POLICY: JSON.stringify({ maxContextBytes: 1024 * 1024, timeoutSeconds: 120 }),
  };
});
const api = apiAs(() => h.url);
const exec = execIn(() => h.client);
const run = testRunId();
/** Engine tags this file made outside sbx (pushed and pulled images), removed in afterAll. */
const localTags = new Set<string>();
const scratch = mkdtemp(join(tmpdir(), 'sbx-images-'));

afterAll(async () => {
  // Every image sbx built for this file's owner, then the tags the file made by hand.
  const built = (await docker('images', '--filter', `label=sbx.owner=${h.config.owner}`, '--format', '{{.ID}}').catch(() => ''))
    .split('\n')
    .filter(Boolean);
  if (built.length > 0) await docker('rmi', '-f', ...new Set(built)).catch(() => undefined);
  for (const tag of localTags) await docker('rmi', '-f', tag).catch(() => undefined);
  await registry?.stop();
  await rm(await scratch, { recursive: true, force: true });
});

/** A TCP server on port 8080 that logs each connection it accepts. */
const SERVER = "require('net').createServer((s)=>{console.log('CONNECTION');s.end()}).listen(8080)";

/** A build context directory with `files` (path → content). */
async function context(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(await scratch, 'ctx-'));
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), content);
  }
  return dir;
}

/** Every event of a build, to its terminal one. */
async function eventsOf(client: SbxClient, id: string, after = 0): Promise<ImageEvent[]> {
  const events: ImageEvent[] = [];
  for await (const event of client.imageEvents(id, after)) events.push(event);
  return events;
}

/** Creates a user key of `tenant`; returns a client with it. */
async function tenantClient(tenant: string): Promise<{ key: string; client: SbxClient }> {
  const answer = await api(h.apiKey, 'POST', '/v1/api-keys', { name: `images-${tenant}`, role: 'user', tenant });
  expect(answer.status, JSON.stringify(answer.body)).toBe(201);
  return { key: answer.body.secret, client: new SbxClient(h.url, answer.body.secret) };
}

describe('images from a registry', () => {
  it('an image absent from the engine is pulled from the allowlisted registry, its digest in the manifest', async () => {
    const ref = `${registry.host}/sbx-test/pushed:${run}`;
    const build = await context({ Dockerfile: `FROM ${h.config.image}\nLABEL sbx-test.pushed="${run}"\n` });
    await docker('build', '-q', '-t', ref, build);
    localTags.add(ref);
    const pushed = await docker('push', ref);
    const digest = /digest: (sha256:[0-9a-f]{64})/.exec(pushed)?.[1];
    expect(digest).toBeDefined();
    await docker('rmi', ref);
    // Two creates at once: both get the image (pulled once in this process).
    const [a, b] = await Promise.all([h.client.createSandbox({ image: ref }), h.client.createSandbox({ image: ref })]);
    for (const lease of [a, b]) {
      expect(lease.status).toBe('ready');
      expect(lease.manifest?.image).toMatchObject({ ref, digest: `${registry.host}/sbx-test/pushed@${digest}` });
      await h.client.releaseSandbox(lease.id);
    }
    expect(registry.log()).toContain(`/v2/sbx-test/pushed/manifests/${run}`);
  }, 240_000); // Pushing the sandbox image's layers (~360 MB) to the empty registry takes most of it.

  it('a registry not on the allowlist is 400, a malformed reference 400, a missing tag 404, and nothing is created', async () => {
    const before = { containers: await containersOf(h.config.owner), leases: (await h.client.listSandboxes()).length };
    await expect(h.client.createSandbox({ image: 'registry.example.com/team/env:1' })).rejects.toMatchObject({
      status: 400,
      code: 'image.registry_not_allowed',
      details: { field: 'image' },
    });
    await expect(h.client.createSandbox({ image: 'Not_A/Valid::ref' })).rejects.toMatchObject({
      status: 400,
      code: 'image.invalid_reference',
      details: { field: 'image' },
    });
    await expect(h.client.createSandbox({ image: `${registry.host}/sbx-test/missing:never-${run}` })).rejects.toMatchObject({
      status: 404,
      code: 'image.not_found',
    });
    // No registry named and nothing on the engine: not pulled (docker.io is not allowlisted), 404.
    await expect(h.client.createSandbox({ image: `no-such-image-${run}:never` })).rejects.toMatchObject({
      status: 404,
      code: 'image.not_found',
    });
    expect(await containersOf(h.config.owner)).toEqual(before.containers);
    expect((await h.client.listSandboxes()).length).toBe(before.leases);
  });
});

describe('image builds', () => {
  it('builds from a context tar, streams the log as resumable events, and a lease runs the image by id', async () => {
    const dir = await context({
      Dockerfile: `FROM ${h.config.image}\nARG GREETING\nCOPY hello.txt /opt/hello.txt\nRUN echo "$GREETING $(cat /opt/hello.txt)" > /opt/greeting\n`,
      'hello.txt': 'world',
    });
    const { image, created } = await h.client.buildImage(dir, { buildArgs: { GREETING: 'hello' }, name: `greeter-${run}` });
    expect(created).toBe(true);
    expect(image).toMatchObject({ status: 'building', dockerfile: 'Dockerfile', buildArgs: { GREETING: 'hello' } });
    const events = await eventsOf(h.client, image.id);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events[0]?.type).toBe('started');
    expect(events.at(-1)?.type).toBe('succeeded');
    expect(events.some((e) => e.type === 'log' && e.text?.includes('COPY hello.txt'))).toBe(true);
    // Resumed after seq 2: every later event once, in order.
    expect((await eventsOf(h.client, image.id, 2)).map((e) => e.seq)).toEqual(events.slice(2).map((e) => e.seq));
    const ready = await h.client.getImage(image.id);
    expect(ready).toMatchObject({ status: 'ready', builder: { tenant: 'default' } });
    expect((await h.client.listImages()).map((i) => i.id)).toContain(image.id);
    const audit = await api(h.apiKey, 'GET', `/v1/audit?action=image.build&target=image:${image.id}`);
    expect(audit.body.entries).toHaveLength(1);
    expect(audit.body.entries[0].actor).toMatchObject({ keyId: 'bootstrap' });

    for (const name of [image.id, `greeter-${run}`]) {
      const lease = await h.client.createSandbox({ image: name });
      expect(lease.manifest?.image).toMatchObject({ ref: name, id: ready.engineImageId });
      const out = await exec(lease.id, { argv: ['cat', '/opt/greeting'] });
      expect(out.stdout).toBe('hello world\n');
      await h.client.releaseSandbox(lease.id);
    }
  });

  it('the same context, Dockerfile path and args return the same image without a rebuild', async () => {
    const files = { Dockerfile: `FROM ${h.config.image}\nRUN echo built-${run} > /opt/once\n` };
    const first = await h.client.buildImage(await context(files));
    await eventsOf(h.client, first.image.id);
    const eventCount = (await eventsOf(h.client, first.image.id)).length;
    // Another directory with the same files packs to the same bytes.
    const second = await h.client.buildImage(await context(files));
    expect(second).toMatchObject({ created: false, image: { id: first.image.id, status: 'ready' } });
    expect(await eventsOf(h.client, first.image.id)).toHaveLength(eventCount);
    // Another build arg is another image.
    const third = await h.client.buildImage(await context(files), { buildArgs: { UNUSED: '1' } });
    expect(third.created).toBe(true);
    expect(third.image.id).not.toBe(first.image.id);
    await eventsOf(h.client, third.image.id);
  });

  it('a failing RUN ends with a terminal failed event carrying the builder message, and nothing is tagged', async () => {
    const { image } = await h.client.buildImage(
      await context({ Dockerfile: `FROM ${h.config.image}\nRUN echo boom-${run} >&2; exit 3\n` }),
    );
    const events = await eventsOf(h.client, image.id);
    const last = events.at(-1)!;
    expect(last.type).toBe('failed');
    expect(last.error?.code).toBe('image.build_failed');
    expect(last.error?.message).toMatch(/non-zero code: 3/);
    expect(events.some((e) => e.text?.includes(`boom-${run}`))).toBe(true);
    expect(await h.client.getImage(image.id)).toMatchObject({ status: 'failed', engineImageId: null });
    // No image of this build carries a tag (the engine tag is set only after success).
    const tagged = await docker('images', '--filter', `label=sbx.build.image=${image.id}`, '--format', '{{.Repository}}:{{.Tag}}');
    expect(tagged.split('\n').filter((t) => t && t !== '<none>:<none>')).toEqual([]);
    await expect(h.client.createSandbox({ image: image.id })).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
  });

  it('RUN steps have no network: a server container receives nothing from a build, while an ordinary container reaches it', async () => {
    // A network and a server container of this test's own (labelled with its owner, so the teardown finds them).
    const net = `${h.config.owner}-net`;
    const server = `${h.config.owner}-server`;
    const labels = ['--label', `sbx.owner=${h.config.owner}`];
    const node = ['--entrypoint', '/usr/local/bin/node', h.config.image];
    await docker('network', 'create', ...labels, net);
    try {
      await docker('run', '-d', '--name', server, '--network', net, ...labels, ...node, '-e', SERVER);
      const address = (await docker('inspect', server, '--format', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')).trim();
      const probe = `const s=require('net').connect(8080,'${address}');s.on('connect',()=>{console.log('REACHED');process.exit(0)});s.on('error',(e)=>{console.log('BLOCKED '+e.code);process.exit(0)});setTimeout(()=>{console.log('BLOCKED timeout');process.exit(0)},3000)`;
      const control = await docker('run', '--rm', '--network', net, ...labels, ...node, '-e', probe);
      expect(control).toContain('REACHED');
      await expect.poll(async () => (await docker('logs', server)).match(/CONNECTION/g)?.length ?? 0).toBe(1);
      const dir = await context({ Dockerfile: `FROM ${h.config.image}\nARG PROBE\nRUN /usr/local/bin/node -e "$PROBE"\n` });
      const { image } = await h.client.buildImage(dir, { buildArgs: { PROBE: probe } });
      const events = await eventsOf(h.client, image.id);
      expect(events.at(-1)?.type).toBe('succeeded');
      const log = events.map((e) => e.text ?? '').join('');
      expect(log).toContain('BLOCKED');
      expect(log).not.toContain('REACHED');
      // Still the control's one connection.
      expect((await docker('logs', server)).match(/CONNECTION/g)?.length ?? 0).toBe(1);
    } finally {
      await docker('rm', '-f', server).catch(() => undefined);
      await docker('network', 'rm', net).catch(() => undefined);
    }
  });

  it('an image is its tenant’s only: another tenant neither sees nor leases it, also by its engine tag', async () => {
    const { image } = await h.client.buildImage(
      await context({ Dockerfile: `FROM ${h.config.image}\nRUN echo mine-${run} > /opt/mine\n` }),
    );
    await eventsOf(h.client, image.id);
    const other = await tenantClient(`other-${run.slice(0, 6)}`);
    await expect(other.client.getImage(image.id)).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
    expect((await other.client.listImages()).map((i) => i.id)).not.toContain(image.id);
    await expect(other.client.deleteImage(image.id)).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
    await expect(other.client.createSandbox({ image: image.id })).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
    const tag = (await docker('images', '--filter', `label=sbx.build.image=${image.id}`, '--format', '{{.Repository}}:{{.Tag}}')).trim();
    expect(tag).toMatch(/^sbx-built:[0-9a-f]{24}$/);
    await expect(other.client.createSandbox({ image: tag })).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
    const events = await api(other.key, 'GET', `/v1/images/${image.id}/events`);
    expect(events.status).toBe(404);
  });

  it('deleting an image is refused while a lease runs from it, and removes it from the engine after', async () => {
    const { image } = await h.client.buildImage(
      await context({ Dockerfile: `FROM ${h.config.image}\nRUN echo used-${run} > /opt/used\n` }),
    );
    await eventsOf(h.client, image.id);
    const lease = await h.client.createSandbox({ image: image.id });
    await expect(h.client.deleteImage(image.id)).rejects.toMatchObject({
      status: 409,
      code: 'image.in_use',
      details: { leases: [lease.id] },
      message: expect.stringContaining(lease.id),
    });
    await h.client.releaseSandbox(lease.id);
    await h.client.deleteImage(image.id);
    await expect(h.client.getImage(image.id)).rejects.toMatchObject({ status: 404, code: 'image.not_found' });
    expect(await docker('images', '-q', '--filter', `label=sbx.build.image=${image.id}`)).toBe('');
  });

  it('bad contexts are documented 4xx answers, a COPY outside the context a clean failed build', async () => {
    const notTar = await api(h.apiKey, 'POST', '/v1/images', new TextEncoder().encode('this is not a tar archive'.repeat(40)));
    expect(notTar.status).toBe(400);
    expect(notTar.body.error.code).toBe('files.invalid_archive');
    await expect(h.client.buildImage(await context({ 'other.txt': 'x' }))).rejects.toMatchObject({
      status: 400,
      code: 'image.dockerfile_not_found',
    });
    await expect(h.client.buildImage(await context({ Dockerfile: 'FROM x\n' }), { dockerfile: '../Dockerfile' })).rejects.toMatchObject({
      status: 400,
      code: 'input.invalid',
    });
    // A base image the build may not use: another registry, or one that exists nowhere (nothing is pulled by the builder).
    await expect(h.client.buildImage(await context({ Dockerfile: 'FROM registry.example.com/team/base:1\n' }))).rejects.toMatchObject({
      status: 400,
      code: 'image.registry_not_allowed',
      details: { field: 'dockerfile', line: 1 },
    });
    await expect(
      h.client.buildImage(await context({ Dockerfile: `ARG BASE\nFROM \${BASE}\n` }), {
        buildArgs: { BASE: `${registry.host}/sbx-test/none:${run}` },
      }),
    ).rejects.toMatchObject({ status: 404, code: 'image.not_found', details: { field: 'dockerfile', line: 2 } });
    const { image: own } = await h.client.buildImage(
      await context({ Dockerfile: `FROM ${h.config.image}\nRUN echo base-${run} > /opt/b\n` }),
      {
        name: `base-${run}`,
      },
    );
    await eventsOf(h.client, own.id);
    await expect(h.client.buildImage(await context({ Dockerfile: `FROM base-${run}\n` }))).rejects.toMatchObject({
      status: 404,
      code: 'image.not_found',
      message: expect.stringContaining('is one of your built images'),
      details: { line: 1, reason: 'built_image_as_base' },
    });
    await h.client.deleteImage(own.id);
    const big = await context({ Dockerfile: `FROM ${h.config.image}\n`, 'big.bin': 'x'.repeat(2 * 1024 * 1024) });
    await expect(h.client.buildImage(big)).rejects.toMatchObject({ status: 413, code: 'input.body_too_large' });
    const escape = await h.client.buildImage(await context({ Dockerfile: `FROM ${h.config.image}\nCOPY ../../etc/passwd /opt/passwd\n` }));
    const last = (await eventsOf(h.client, escape.image.id)).at(-1);
    expect(last).toMatchObject({ type: 'failed', error: { code: 'image.build_failed' } });
    expect(last?.error?.message).toMatch(/outside the build context|no such file|not found/i);
    expect(await h.client.getImage(escape.image.id)).toMatchObject({ status: 'failed' });
  });

  it('the CLI builds (log on stderr, id on stdout), lists and removes an image by its name; a failed build exits 1 with the builder message; --json errors on stdout', async () => {
    const cli = (...args: string[]) => runCli(h, args);
    const dir = await context({ 'docker/Build.df': `FROM ${h.config.image}\nARG WORD\nRUN echo "cli-$WORD" > /opt/cli\n` });
    const built = await cli('image', 'build', dir, '--dockerfile', 'docker/Build.df', '--build-arg', `WORD=${run}`, '--name', `cli-${run}`);
    expect(built.code, built.stderr).toBe(0);
    const id = built.stdout.trim();
    expect(id).toMatch(/^img_[0-9a-f]{24}$/);
    expect(built.stderr).toContain('RUN echo');
    expect((await cli('image', 'ls')).stdout).toContain(`${id}  ready`);
    expect((await cli('image', 'rm', `cli-${run}`)).code).toBe(0);
    await expect(h.client.getImage(id)).rejects.toMatchObject({ code: 'image.not_found' });
    const missing = await cli('--json', 'image', 'rm', id);
    expect(missing.code).toBe(125);
    expect(JSON.parse(missing.stdout)).toMatchObject({ error: { code: 'image.not_found', status: 404, retryability: expect.any(String) } });
    expect((await cli('image', 'rm', `no-such-${run}`)).stderr).toContain(`no image named no-such-${run}`);
    const failed = await cli('image', 'build', await context({ Dockerfile: `FROM ${h.config.image}\nRUN exit 7\n` }));
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/build failed: .*non-zero code: 7/);
  });
});
