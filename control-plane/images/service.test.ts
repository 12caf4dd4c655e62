import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { Principal } from '../http/auth.js';
import { noImageEngine, type EngineBuild, type EngineImage, type ImageEngine } from '../runtime/image-engine.js';
import { BuildPolicy, type ImageEvent, type ImageEventBody, type ImageRecord } from './schema.js';
import { IMAGE_LABEL, ImageService } from './service.js';
import type { ImageStore } from './store.js';

const dir = await mkdtemp(join(tmpdir(), 'sbx-images-unit-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

/** The store's records and events in memory. */
function fakeStore(): ImageStore {
  const records = new Map<string, ImageRecord>();
  const content = new Map<string, string>();
  const names = new Map<string, string>();
  const events = new Map<string, ImageEvent[]>();
  const store = {
    notifyChannel: (id: string) => `notify:image:${id}`,
    async claim(r: ImageRecord) {
      const key = `${r.tenant}:${r.contentDigest}`;
      const holder = content.get(key);
      if (holder && records.has(holder)) return records.get(holder)!;
      content.set(key, r.id);
      records.set(r.id, r);
      return null;
    },
    async put(r: ImageRecord) {
      records.set(r.id, r);
    },
    async finish(r: ImageRecord) {
      if (records.get(r.id)?.status !== 'building') return false;
      records.set(r.id, r);
      return true;
    },
    get: async (id: string) => records.get(id) ?? null,
    list: async (tenant: string) => [...records.values()].filter((r) => r.tenant === tenant),
    async setName(tenant: string, name: string, id: string) {
      names.set(`${tenant}:${name}`, id);
    },
    byName: async (tenant: string, name: string) => names.get(`${tenant}:${name}`) ?? null,
    async delete(r: ImageRecord) {
      records.delete(r.id);
    },
    async appendEvent(id: string, body: ImageEventBody, at: Date) {
      const list = events.get(id) ?? [];
      list.push({ ...body, seq: list.length + 1, at: at.toISOString() });
      events.set(id, list);
      return list.length;
    },
    async clearEvents(id: string) {
      events.delete(id);
    },
    readEvents: async (id: string, after = 0) => (events.get(id) ?? []).slice(after),
  };
  return store as unknown as ImageStore;
}

/** An image's config as the engine reports it (a user, so the planner's tool-user rules have something to read). */
const configOf = (id: string, labels: Record<string, string> = {}): EngineImage['config'] => ({
  id,
  env: { PATH: '/usr/bin' },
  workingDir: '/work',
  user: 'app',
  labels,
  entrypoint: null,
  cmd: ['bash'],
  repoDigests: [],
});

/** An engine holding `images` by reference; builds fail when the Dockerfile path says so. */
function fakeEngine(images: Map<string, EngineImage>, pullable: Map<string, EngineImage> = new Map()) {
  const calls = { builds: 0, pulls: 0, networks: [] as EngineBuild['network'][] };
  const engine: ImageEngine = {
    buildProxy: true,
    buildsUnsupported: null,
    inspect: async (ref) => images.get(ref) ?? null,
    async pull(ref) {
      calls.pulls += 1;
      const found = pullable.get(ref);
      if (!found) throw new AppError('image.not_found', `no ${ref}`);
      images.set(ref, found);
    },
    async build(spec: EngineBuild) {
      calls.builds += 1;
      calls.networks.push(spec.network);
      spec.onLog('Step 1/1 : FROM base\n');
      if (spec.dockerfile === 'fails')
        throw new AppError('image.build_failed', "The command '/bin/sh -c exit 3' returned a non-zero code: 3");
      const id = `sha256:${calls.builds}`;
      const image = { id, repoDigests: [], sizeBytes: 10, labels: spec.labels, config: configOf(id, spec.labels) };
      images.set(spec.tag, image);
      images.set(image.id, image);
      return { imageId: image.id };
    },
    async remove(ref) {
      images.delete(ref);
    },
    usedBy: async () => [],
  };
  return { engine, calls };
}

const alice: Principal = { keyId: 'key_a', role: 'user', tenant: 'alice' };
const bob: Principal = { keyId: 'key_b', role: 'user', tenant: 'bob' };

/** The egress proxy's and the egress log's calls, in order. */
function fakeEgress() {
  const calls: string[] = [];
  return {
    calls,
    egress: {
      serve: async (id: string, rules: readonly unknown[], socketPath: string) => {
        calls.push(`serve ${id} ${JSON.stringify(rules)} ${socketPath}`);
      },
      stop: async (id: string) => {
        calls.push(`stop ${id}`);
      },
    },
    egressLog: {
      clear: async (id: string) => {
        calls.push(`clear ${id}`);
      },
    },
  };
}

function service(
  engine: ImageEngine,
  store = fakeStore(),
  policy: unknown = {},
  egress = fakeEgress(),
): { images: ImageService; store: ImageStore } {
  const images = new ImageService({
    store,
    engine,
    audit: { record: async () => ({}) as never },
    ownership: { owner: 'o', installation: 'i' },
    registries: ['127.0.0.1:5000'],
    buildPolicy: BuildPolicy.parse(policy),
    buildNetwork: { egress: egress.egress, socketDir: join(dir, 'egress') },
    egressLog: egress.egressLog,
    now: () => new Date(),
    log: pino({ level: 'silent' }),
  });
  return { images, store };
}

async function contextFile(): Promise<string> {
  const path = join(dir, `${Math.random()}.tar`);
  await writeFile(path, 'context');
  return path;
}

describe('ImageService', () => {
  it('the same input returns the same image without building again', async () => {
    const { engine, calls } = fakeEngine(new Map());
    const { images } = service(engine);
    const input = { contextBytes: 7, contextSha256: 'ab'.repeat(32), dockerfile: 'Dockerfile', buildArgs: { A: '1' } };
    const first = await images.build({ ...input, contextPath: await contextFile() }, alice);
    await images.settled(first.image.id);
    const again = await images.build({ ...input, contextPath: await contextFile() }, alice);
    expect(again).toMatchObject({ created: false, image: { id: first.image.id, status: 'ready' } });
    expect(calls.builds).toBe(1);
    // Another tenant's identical input is its own image.
    const other = await images.build({ ...input, contextPath: await contextFile() }, bob);
    expect(other.image.id).not.toBe(first.image.id);
  });

  it('a failed build ends with a failed event carrying the builder message, and a retry of the input builds again', async () => {
    const { engine, calls } = fakeEngine(new Map());
    const { images, store } = service(engine);
    const input = { contextBytes: 7, contextSha256: 'cd'.repeat(32), dockerfile: 'fails', buildArgs: {} };
    const { image } = await images.build({ ...input, contextPath: await contextFile() }, alice);
    await images.settled(image.id);
    const events = await store.readEvents(image.id);
    expect(events.map((e) => e.type)).toEqual(['started', 'log', 'failed']);
    expect(events.at(-1)?.error?.message).toContain('non-zero code: 3');
    expect((await images.get(image.id, alice)).status).toBe('failed');
    const retry = await images.build({ ...input, contextPath: await contextFile() }, alice);
    expect(retry.created).toBe(true);
    await images.settled(image.id);
    expect(calls.builds).toBe(2);
  });

  it('resolves a tenant’s built image by id and name, never another tenant’s, also by engine tag', async () => {
    const { engine } = fakeEngine(new Map());
    const { images } = service(engine);
    const input = { contextBytes: 7, contextSha256: 'ef'.repeat(32), dockerfile: 'Dockerfile', buildArgs: {}, name: 'env' };
    const { image } = await images.build({ ...input, contextPath: await contextFile() }, alice);
    await images.settled(image.id);
    const record = await images.get(image.id, alice);
    expect(await images.resolve(image.id, 'alice')).toMatchObject({ engineRef: record.engineRef, imageId: record.engineImageId });
    expect(await images.resolve('env', 'alice')).toMatchObject({ engineRef: record.engineRef });
    await expect(images.resolve(image.id, 'bob')).rejects.toMatchObject({ code: 'image.not_found' });
    await expect(images.resolve(record.engineRef, 'bob')).rejects.toMatchObject({ code: 'image.not_found' });
    await expect(images.get(image.id, bob)).rejects.toMatchObject({ code: 'image.not_found' });
    expect(record.engineRef).toMatch(/^sbx-built:/);
    expect((await engine.inspect(record.engineRef))?.labels[IMAGE_LABEL.tenant]).toBe('alice');
  });

  it('pulls an absent image of an allowlisted registry, and only then', async () => {
    const pulled: EngineImage = {
      id: 'sha256:p',
      repoDigests: [`127.0.0.1:5000/x@sha256:${'1'.repeat(64)}`],
      sizeBytes: 1,
      labels: {},
      config: configOf('sha256:p'),
    };
    const { engine, calls } = fakeEngine(new Map(), new Map([['127.0.0.1:5000/x:1', pulled]]));
    const { images } = service(engine);
    expect(await images.resolve('127.0.0.1:5000/x:1', 'alice')).toEqual({
      engineRef: '127.0.0.1:5000/x:1',
      imageId: 'sha256:p',
      digest: pulled.repoDigests[0],
      pulled: true,
      // The config of the image it found, so that the lease planner asks the engine no second time.
      config: pulled.config,
    });
    expect((await images.resolve('127.0.0.1:5000/x:1', 'alice')).pulled).toBe(false);
    await expect(images.resolve('127.0.0.1:5000/x:missing', 'alice')).rejects.toMatchObject({ code: 'image.not_found' });
    await expect(images.resolve('not-here:1', 'alice')).rejects.toMatchObject({ code: 'image.not_found' });
    await expect(images.resolve('other.example/x:1', 'alice')).rejects.toMatchObject({ code: 'image.registry_not_allowed' });
    expect(calls.pulls).toBe(2);
  });

  it('a build under an allowlist is served by the egress proxy under its image id, stopped after it succeeds or fails', async () => {
    const { engine, calls } = fakeEngine(new Map());
    const egress = fakeEgress();
    const policy = { network: { allow: ['mirror.example.org:8080', { cidr: '10.0.0.0/8', ports: [80] }] } };
    const { images } = service(engine, fakeStore(), policy, egress);
    const input = { contextBytes: 7, contextSha256: '12'.repeat(32), dockerfile: 'Dockerfile', buildArgs: {} };
    const { image } = await images.build({ ...input, contextPath: await contextFile() }, alice);
    await images.settled(image.id);
    const socketPath = join(dir, 'egress', image.id, 'proxy.sock');
    expect(calls.networks).toEqual([{ proxySocketPath: socketPath }]);
    const rules = [
      { host: 'mirror.example.org', ports: [8080] },
      { cidr: '10.0.0.0/8', ports: [80] },
    ];
    expect(egress.calls).toEqual([`serve ${image.id} ${JSON.stringify(rules)} ${socketPath}`, `stop ${image.id}`]);
    const failing = await images.build({ ...input, dockerfile: 'fails', contextPath: await contextFile() }, alice);
    await images.settled(failing.image.id);
    expect(egress.calls.slice(2)).toEqual([expect.stringMatching(`^serve ${failing.image.id} `), `stop ${failing.image.id}`]);
    // Built again after the failure: its old egress log goes with its old events; deleted: the log too.
    await images.build({ ...input, dockerfile: 'fails', contextPath: await contextFile() }, alice);
    await images.settled(failing.image.id);
    expect(egress.calls).toContain(`clear ${failing.image.id}`);
    await images.remove(image.id, alice);
    expect(egress.calls.at(-1)).toBe(`clear ${image.id}`);
  });

  it('network none serves no proxy; an allowlist on an engine that cannot take the proxy is policy.unenforceable', async () => {
    const { engine, calls } = fakeEngine(new Map());
    const egress = fakeEgress();
    const { images } = service(engine, fakeStore(), {}, egress);
    const input = { contextBytes: 7, contextSha256: '34'.repeat(32), dockerfile: 'Dockerfile', buildArgs: {} };
    const { image } = await images.build({ ...input, contextPath: await contextFile() }, alice);
    await images.settled(image.id);
    expect(calls.networks).toEqual(['none']);
    expect(egress.calls).toEqual([]);
    const remote = { ...engine, buildProxy: false };
    const strict = service(remote, fakeStore(), { network: { allow: ['mirror.example.org'] } }, egress).images;
    expect(() => strict.checkBuildPolicy()).toThrow(expect.objectContaining({ code: 'policy.unenforceable' }));
    await expect(strict.build({ ...input, contextPath: await contextFile() }, alice)).rejects.toMatchObject({
      code: 'policy.unenforceable',
    });
    // A control plane with no engine of its own (the Kubernetes driver) builds nothing, and says why by name.
    const none = service(noImageEngine('kubernetes', 'use a registry'), fakeStore(), {}, egress).images;
    const unsupported = { code: 'runtime.unsupported', details: { feature: 'image builds', runtime: 'kubernetes' } };
    expect(() => none.checkBuildPolicy()).toThrow(expect.objectContaining(unsupported));
    const context = await contextFile();
    await expect(none.build({ ...input, contextPath: context }, alice)).rejects.toMatchObject(unsupported);
    await expect(stat(context)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(egress.calls).toEqual([]);
  });
});
