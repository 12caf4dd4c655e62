import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { RegistryImages } from './registry-images.js';

const sha = (bytes: string): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const configOf = (arch: string): string =>
  JSON.stringify({ architecture: arch, config: { Env: ['PATH=/bin', `ARCH=${arch}`], User: '1000', WorkingDir: '/w' } });
const manifestOf = (config: string): string =>
  JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { digest: sha(config) } });
const configs = { amd64: configOf('amd64'), arm64: configOf('arm64') };
const manifests = { amd64: manifestOf(configs.amd64), arm64: manifestOf(configs.arm64) };
const index = JSON.stringify({
  schemaVersion: 2,
  mediaType: 'application/vnd.oci.image.index.v1+json',
  manifests: (['amd64', 'arm64'] as const).map((arch) => ({ digest: sha(manifests[arch]), platform: { os: 'linux', architecture: arch } })),
});

/** A registry on loopback answering only what these tests name; `/v2/lying/...` answers a digest that is not its body's. */
const bodies = new Map<string, string>([
  ['/v2/app/manifests/v1', index],
  [`/v2/app/manifests/${sha(manifests.amd64)}`, manifests.amd64],
  [`/v2/app/manifests/${sha(manifests.arm64)}`, manifests.arm64],
  [`/v2/app/blobs/${sha(configs.amd64)}`, configs.amd64],
  [`/v2/app/blobs/${sha(configs.arm64)}`, configs.arm64],
  [`/v2/app/manifests/${sha('x')}`, manifests.amd64],
  ['/v2/broken/manifests/v1', 'not json'],
]);
let registry = '';
const server = http.createServer((req, res) => {
  const body = bodies.get(req.url ?? '');
  if (body === undefined) res.writeHead(404).end();
  else res.writeHead(200, { 'content-type': 'application/json' }).end(body);
});

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  registry = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function codeOf(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  return (err as AppError).code;
}

describe('image configs read from a registry', () => {
  const images = (): RegistryImages => new RegistryImages({ plainHttp: new Set([registry]) });

  it("resolves an index to the nodes' architecture and pins the manifest it read", async () => {
    for (const arch of ['amd64', 'arm64'] as const) {
      const { config, pinned } = await images().inspect(`${registry}/app:v1`, arch);
      expect(config).toMatchObject({ id: sha(configs[arch]), user: '1000', workingDir: '/w', env: { PATH: '/bin', ARCH: arch } });
      expect(pinned).toBe(`${registry}/app@${sha(manifests[arch])}`);
    }
    expect(await codeOf(images().inspect(`${registry}/app:v1`, 's390x'))).toBe('image.not_found');
  });

  it('takes a digest reference only when the bytes match it (a tag beside it is ignored)', async () => {
    const byDigest = await images().inspect(`${registry}/app:anything@${sha(manifests.amd64)}`);
    expect(byDigest.pinned).toBe(`${registry}/app@${sha(manifests.amd64)}`);
    // The registry answers the amd64 manifest for a digest that is not its sha256.
    expect(await codeOf(images().inspect(`${registry}/app@${sha('x')}`))).toBe('image.pull_failed');
  });

  it('answers absent as image.not_found and a body that is not JSON as image.pull_failed, never a 500', async () => {
    expect(await codeOf(images().inspect(`${registry}/none:v1`))).toBe('image.not_found');
    expect(await codeOf(images().inspect(`${registry}/broken:v1`))).toBe('image.pull_failed');
  });
});
