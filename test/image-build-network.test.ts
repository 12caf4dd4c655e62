/**
 * The network of image builds under a build policy that allowlists hosts (`SBX_IMAGE_BUILD_POLICY`
 * `network: {allow}`): a build's RUN steps reach exactly the allowlisted hosts, through the
 * control plane's egress proxy (HTTP and CONNECT), each connection in the build's egress log;
 * anything else, through the proxy or directly, gets nothing. The "internet" is this machine's
 * own servers: a mirror on 127.0.0.2 (allowlisted by name and by its cidr), a second server on
 * the Docker bridge's host address (not allowlisted, reachable from an ordinary container: the
 * positive control), and a DNS server on 127.0.0.1 that the proxy resolves with.
 */
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ImageEvent } from '../contract/images.js';
import { apiAs, bridgeHostAddress, docker, runCli, startTestDns, testRunId, useHarness, type TestDns } from './fixtures/index.js';

/** An HTTP server of this test that records every request it gets. */
interface Destination {
  server: Server;
  port: number;
  hits: string[];
}

async function destination(host: string, body: (url: string) => string): Promise<Destination> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.end(body(req.url ?? ''));
  });
  // A CONNECT to this server (through the egress proxy's tunnel) is a plain HTTP request here.
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as AddressInfo).port, hits };
}

const run = testRunId();
let mirror: Destination;
let other: Destination;
let gateway: string;
let dns: TestDns;
const scratch = mkdtemp(join(tmpdir(), 'sbx-build-net-'));

const h = useHarness(async () => {
  gateway = await bridgeHostAddress();
  mirror = await destination('127.0.0.2', (url) => `mirror-${run} ${url}\n`);
  other = await destination(gateway, (url) => `other ${url}\n`);
  const records: Record<string, string> = { 'mirror.build.test': '127.0.0.2', 'other.build.test': gateway };
  dns = await startTestDns(records);
  return {
    SBX_EGRESS_DNS_SERVERS: dns.address,
    // The mirror by name (shorthand) and its loopback address by cidr (a host rule alone reaches only public addresses).
    SBX_IMAGE_BUILD_POLICY: JSON.stringify({
      network: { allow: [`mirror.build.test:${mirror.port}`, { cidr: '127.0.0.2/32', ports: [mirror.port] }] },
      timeoutSeconds: 180,
      maxContextBytes: 1024 * 1024,
    }),
  };
});

afterAll(async () => {
  const built = (await docker('images', '--filter', `label=sbx.owner=${h.config.owner}`, '--format', '{{.ID}}').catch(() => ''))
    .split('\n')
    .filter(Boolean);
  if (built.length > 0) await docker('rmi', '-f', ...new Set(built)).catch(() => undefined);
  mirror?.server.close();
  other?.server.close();
  await dns?.close();
  await rm(await scratch, { recursive: true, force: true });
});

/** A build context directory holding `Dockerfile`. */
async function context(dockerfile: string): Promise<string> {
  const dir = await mkdtemp(join(await scratch, 'ctx-'));
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'Dockerfile'), dockerfile);
  return dir;
}

async function eventsOf(id: string): Promise<ImageEvent[]> {
  const events: ImageEvent[] = [];
  for await (const event of h.client.imageEvents(id)) events.push(event);
  return events;
}

/** The build's helpers still on the engine (the proxy helper is removed when the build ends). */
async function helpersOf(imageId: string): Promise<string> {
  return (await docker('ps', '-a', '-q', '--filter', `label=sbx.build.image=${imageId}`)).trim();
}

const api = apiAs(() => h.url);

describe('image builds with an allowlisted network', () => {
  it('sbx image build: a RUN step fetches from the allowlisted mirror (HTTP and a CONNECT tunnel), logged under the build; no proxy setting lands in the image', async () => {
    const dir = await context(
      [
        `FROM ${h.config.image}`,
        `RUN curl -sSf http://mirror.build.test:${mirror.port}/pkg.txt -o /opt/pkg.txt`,
        // -p: through a CONNECT tunnel, as an https:// URL would go.
        `RUN curl -sSf -p http://mirror.build.test:${mirror.port}/tunnel.txt -o /opt/tunnel.txt`,
        '',
      ].join('\n'),
    );
    const built = await runCli(h, ['image', 'build', dir, '--name', `mirror-${run}`]);
    expect(built.code, built.stderr).toBe(0);
    const id = built.stdout.trim();
    expect(mirror.hits).toEqual(['GET /pkg.txt', 'GET /tunnel.txt']);
    const image = await h.client.getImage(id);
    expect(image.status).toBe('ready');
    const cat = await docker(
      'run',
      '--rm',
      '--network',
      'none',
      '--entrypoint',
      'cat',
      image.engineImageId!,
      '/opt/pkg.txt',
      '/opt/tunnel.txt',
    );
    expect(cat).toBe(`mirror-${run} /pkg.txt\nmirror-${run} /tunnel.txt\n`);
    // The proxy variables were build args Docker predefines: not in the image's config or history.
    const inspected = await docker('inspect', '--format', '{{json .Config.Env}}', image.engineImageId!);
    expect(inspected).not.toMatch(/proxy|3128/i);
    expect(await docker('history', '--no-trunc', '--format', '{{.CreatedBy}}', image.engineImageId!)).not.toMatch(/proxy=|3128/i);
    const egress = await h.client.imageEgress(id);
    expect(egress.map((e) => [e.decision, e.method, e.host, e.port, e.address])).toEqual([
      ['allowed', 'GET', 'mirror.build.test', mirror.port, '127.0.0.2'],
      ['allowed', 'CONNECT', 'mirror.build.test', mirror.port, '127.0.0.2'],
    ]);
    const listed = await runCli(h, ['image', 'egress', `mirror-${run}`]);
    expect(listed.stdout).toContain(`allowed GET mirror.build.test:${mirror.port}`);
    // The build's helper and its socket directory are gone.
    expect(await helpersOf(id)).toBe('');
    await expect(stat(join(h.config.dataDir, 'egress', id))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a server that is not allowlisted gets nothing from a build, through the proxy or directly, while an ordinary container reaches it', async () => {
    // Positive control: an ordinary container on the default bridge reaches the second server.
    const control = await docker(
      'run',
      '--rm',
      '--network',
      'bridge',
      '--label',
      `sbx.owner=${h.config.owner}`,
      '--entrypoint',
      'curl',
      h.config.image,
      '-sS',
      '--max-time',
      '10',
      `http://${gateway}:${other.port}/control`,
    );
    expect(control).toBe('other /control\n');
    expect(other.hits).toEqual(['GET /control']);
    const mirrorHits = mirror.hits.length;
    const probe = [
      `curl -sS -o /dev/null -w 'by-name=%{http_code}\\n' http://other.build.test:${other.port}/by-name`,
      `curl -sS -o /dev/null -w 'by-address=%{http_code}\\n' http://${gateway}:${other.port}/by-address`,
      `(curl -sS -p --max-time 10 http://other.build.test:${other.port}/tunnel 2>&1; echo "tunnel-exit=$?")`,
      `(curl -sS --noproxy '*' --max-time 10 http://${gateway}:${other.port}/direct 2>&1; echo "direct-exit=$?")`,
      `(curl -sS --noproxy '*' --max-time 10 http://127.0.0.2:${mirror.port}/direct 2>&1; echo "direct-mirror-exit=$?")`,
      `(getent hosts mirror.build.test || echo "no-dns")`,
    ].join('; ');
    const dir = await context(`FROM ${h.config.image}\nRUN ${probe}\n`);
    const { image } = await h.client.buildImage(dir);
    const events = await eventsOf(image.id);
    expect(events.at(-1)?.type).toBe('succeeded');
    const log = events.map((e) => e.text ?? '').join('');
    expect(log).toContain('by-name=403');
    expect(log).toContain('by-address=403');
    expect(log).toMatch(/tunnel-exit=[1-9]/);
    expect(log).toMatch(/direct-exit=[1-9]/);
    expect(log).toMatch(/direct-mirror-exit=[1-9]/);
    expect(log).toContain('no-dns');
    // Still the control's one request; the mirror got nothing from this build either.
    expect(other.hits).toEqual(['GET /control']);
    expect(mirror.hits.length).toBe(mirrorHits);
    const denied = await h.client.imageEgress(image.id, { decision: 'denied' });
    expect(denied.map((e) => [e.method, e.host, e.port])).toEqual([
      ['GET', 'other.build.test', other.port],
      ['GET', gateway, other.port],
      ['CONNECT', 'other.build.test', other.port],
    ]);
    expect(await h.client.imageEgress(image.id, { decision: 'allowed' })).toEqual([]);
    expect(await helpersOf(image.id)).toBe('');
  });

  it('a RUN step that needs a host off the allowlist fails the build cleanly: failed event, no tag, no helper left', async () => {
    const otherHits = other.hits.length;
    const dir = await context(`FROM ${h.config.image}\nRUN curl -sSf http://other.build.test:${other.port}/needed -o /opt/needed\n`);
    const { image } = await h.client.buildImage(dir);
    const last = (await eventsOf(image.id)).at(-1);
    expect(last).toMatchObject({ type: 'failed', error: { code: 'image.build_failed' } });
    expect(last?.error?.message).toMatch(/non-zero code/);
    const tagged = await docker('images', '--filter', `label=sbx.build.image=${image.id}`, '--format', '{{.Repository}}:{{.Tag}}');
    expect(tagged.split('\n').filter((t) => t && t !== '<none>:<none>')).toEqual([]);
    expect(await helpersOf(image.id)).toBe('');
    expect(other.hits.length).toBe(otherHits);
    expect((await h.client.imageEgress(image.id)).map((e) => e.decision)).toEqual(['denied']);
    // Another tenant cannot read the build's egress log.
    const key = await api(h.apiKey, 'POST', '/v1/api-keys', { name: `other-${run}`, role: 'user', tenant: `t-${run.slice(0, 6)}` });
    expect(key.status).toBe(201);
    expect((await api(key.body.secret, 'GET', `/v1/images/${image.id}/egress`)).status).toBe(404);
  });
});
