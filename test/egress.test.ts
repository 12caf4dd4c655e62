/**
 * Network policy against real containers: mode `none` and mode `allowlist` (the control plane's
 * egress proxy). The "internet" here is this machine's own servers: HTTP servers on loopback
 * addresses of the host (127.0.0.2, 127.0.0.3), a DNS server on 127.0.0.1 that the proxy
 * resolves with, a server on the Docker bridge's host address, and one on a link-local address
 * this test adds to the host's loopback interface. A destination is shown blocked by running a
 * server there and showing it received nothing, next to a control that reaches it.
 */
import { copyFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  REPO_ROOT,
  docker,
  startHarness,
  type Harness,
  execIn,
  bridgeHostAddress,
  useScratchDirs,
  startTestDns,
  type TestDns,
} from './fixtures/index.js';

/** Temporary directories of this file, removed after its tests. */
const scratch = useScratchDirs();

/** An HTTP server on the host that counts the requests it got. */
interface Destination {
  server: Server;
  port: number;
  hits: string[];
}

async function destination(host: string, port = 0): Promise<Destination> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.end(`hello from ${host}\n`);
  });
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  return { server, port: (server.address() as AddressInfo).port, hits };
}

let h: Harness;
let allowed: Destination;
let otherPort: Destination;
let internal: Destination;
let dns: TestDns;

const RECORDS: Record<string, string> = {
  'api.allowed.test': '127.0.0.2',
  'x.wild.test': '127.0.0.2',
  'rebind.wild.test': '127.0.0.3',
  'unlisted.test': '127.0.0.2',
};

beforeAll(async () => {
  allowed = await destination('127.0.0.2');
  otherPort = await destination('127.0.0.2');
  internal = await destination('127.0.0.3', allowed.port);
  dns = await startTestDns(RECORDS);

  const policyDir = await scratch('sbx-egress-policies-');
  await copyFile(join(REPO_ROOT, 'policies', 'default.yaml'), join(policyDir, 'default.yaml'));
  const defaults = (await import('yaml')).parse(
    await (await import('node:fs/promises')).readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'),
  );
  const egressPolicy = {
    ...defaults,
    name: 'egress-test',
    version: 1,
    network: {
      mode: 'allowlist',
      allow: [
        { host: 'api.allowed.test', ports: [allowed.port] },
        { host: '*.wild.test', ports: [allowed.port] },
        // The test destinations are on loopback, which a host rule alone never reaches.
        { cidr: '127.0.0.2/32', ports: [allowed.port] },
      ],
    },
  };
  await writeFile(join(policyDir, 'egress-test.yaml'), JSON.stringify(egressPolicy));
  await writeFile(
    join(policyDir, 'open-test.yaml'),
    JSON.stringify({ ...defaults, name: 'open-test', version: 1, network: { mode: 'open' } }),
  );
  h = await startHarness({ SBX_POLICY_DIR: policyDir, SBX_EGRESS_DNS_SERVERS: dns.address });
});

afterAll(async () => {
  await h?.close();
  for (const d of [allowed, otherPort, internal]) d?.server.close();
  await dns?.close();
});

const exec = execIn(() => h.client, { args: { timeoutMs: 30_000 } });

describe('network mode allowlist: the egress proxy is the only way out', () => {
  let leaseId: string;
  beforeAll(async () => {
    leaseId = (await h.client.createSandbox({ policy: 'egress-test' })).id;
  });

  it('records the mode and the allowlist digest in the manifest', async () => {
    const { allowlistDigest } = await import('../control-plane/egress/rules.js');
    const lease = await h.client.getSandbox(leaseId);
    expect(lease.manifest!.network.mode).toBe('allowlist');
    expect(lease.manifest!.network.allowlistDigest).toBe(
      allowlistDigest([
        { host: 'api.allowed.test', ports: [allowed.port] },
        { host: '*.wild.test', ports: [allowed.port] },
        { cidr: '127.0.0.2/32', ports: [allowed.port] },
      ]),
    );
  });

  it('an allowed host is reached over plain HTTP through the proxy, and the connection is logged with its bytes', async () => {
    const before = allowed.hits.length;
    const r = await exec(leaseId, `curl -sS --max-time 10 http://api.allowed.test:${allowed.port}/plain`);
    expect(r.stdout).toBe('hello from 127.0.0.2\n');
    expect(allowed.hits.slice(before)).toEqual(['GET /plain']);
    const events = await h.client.egress(leaseId, { decision: 'allowed' });
    expect(events.at(-1)).toMatchObject({
      host: 'api.allowed.test',
      port: allowed.port,
      method: 'GET',
      decision: 'allowed',
      address: '127.0.0.2',
      error: null,
    });
    expect(events.at(-1)!.rule).toContain('api.allowed.test');
    expect(events.at(-1)!.bytesIn).toBe('hello from 127.0.0.2\n'.length);
  });

  it('a *.suffix host is reached through a CONNECT tunnel (how HTTPS goes), bytes counted both ways', async () => {
    const before = allowed.hits.length;
    const r = await exec(leaseId, `curl -sS --max-time 10 --proxytunnel http://x.wild.test:${allowed.port}/tunnel`);
    expect(r.stdout).toBe('hello from 127.0.0.2\n');
    expect(allowed.hits.slice(before)).toEqual(['GET /tunnel']);
    const last = (await h.client.egress(leaseId)).at(-1)!;
    expect(last).toMatchObject({ host: 'x.wild.test', method: 'CONNECT', decision: 'allowed', address: '127.0.0.2' });
    expect(last.bytesOut).toBeGreaterThan(0);
    expect(last.bytesIn).toBeGreaterThan(0);
  });

  it('an unlisted host is denied with 403 even though it resolves to an allowed address, and its server gets nothing', async () => {
    const before = allowed.hits.length;
    const plain = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://unlisted.test:${allowed.port}/x`);
    const tunnel = await exec(leaseId, `curl -sS --proxytunnel http://unlisted.test:${allowed.port}/x 2>&1; echo " exit=$?"`);
    expect(plain.stdout).toBe('403');
    expect(tunnel.stdout).toMatch(/403/);
    expect(allowed.hits.length).toBe(before);
    const denied = await h.client.egress(leaseId, { decision: 'denied' });
    expect(
      denied
        .filter((e) => e.host === 'unlisted.test')
        .map((e) => e.method)
        .sort(),
    ).toEqual(['CONNECT', 'GET']);
    expect(denied.find((e) => e.host === 'unlisted.test')!.rule).toBe(`no rule allows unlisted.test:${allowed.port}`);
  });

  it('a listed host on a port its rule does not list is denied, and the server on that port gets nothing', async () => {
    const r = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://api.allowed.test:${otherPort.port}/`);
    expect(r.stdout).toBe('403');
    expect(otherPort.hits).toEqual([]);
  });

  it('a name that matches a host rule but resolves to an internal address is denied (DNS rebinding), and that server gets nothing', async () => {
    const r = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://rebind.wild.test:${allowed.port}/`);
    expect(r.stdout).toBe('403');
    expect(internal.hits).toEqual([]);
    const event = (await h.client.egress(leaseId, { decision: 'denied' })).at(-1)!;
    expect(event).toMatchObject({ host: 'rebind.wild.test', address: '127.0.0.3' });
    expect(event.rule).toContain('loopback address 127.0.0.3 needs a cidr rule');
  });

  it('IP literals need a cidr rule: the link-local metadata address is refused before any connection is made', async () => {
    const metadata = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/`);
    expect(metadata.stdout).toBe('403');
    const internalByIp = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.3:${allowed.port}/`);
    expect(internalByIp.stdout).toBe('403');
    expect(internal.hits).toEqual([]);
    const byIp = await exec(leaseId, `curl -sS http://127.0.0.2:${allowed.port}/by-ip`);
    expect(byIp.stdout).toBe('hello from 127.0.0.2\n');
    const events = await h.client.egress(leaseId);
    expect(events.find((e) => e.host === '169.254.169.254')).toMatchObject({ decision: 'denied', address: null, bytesOut: 0, bytesIn: 0 });
  });

  it('the sandbox cannot resolve names itself, has no interface but loopback, no routes, no raw sockets', async () => {
    const queriesBefore = dns.queries.length;
    const r = await exec(
      leaseId,
      [
        'getent hosts api.allowed.test; echo "getent=$?"',
        'ip -o link | cut -d: -f2 | tr -d " " | sort | tr "\\n" ","; echo',
        'echo "routes4=[$(ip -4 route)] routes6=[$(ip -6 route)]"',
        `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2>&1 | tail -1`,
      ].join('; '),
    );
    expect(r.stdout).toContain('getent=2');
    expect(r.stdout).toContain('\nlo,\n');
    expect(r.stdout).toContain('routes4=[] routes6=[]');
    expect(r.stdout).toMatch(/PermissionError|Operation not permitted/);
    expect(dns.queries.length).toBe(queriesBefore);
  });

  it('a tool that ignores the proxy has no network: a server on the host bridge address, reachable from an ordinary container, gets nothing', async () => {
    const gateway = await bridgeHostAddress();
    const bridgeServer = await destination(gateway);
    try {
      const image = (await h.client.getSandbox(leaseId)).image;
      // Positive control: the destination is reachable from a container with a network.
      const control = await docker(
        'run',
        '--rm',
        '--network',
        'bridge',
        '--entrypoint',
        'curl',
        image,
        '-sS',
        '--max-time',
        '5',
        `http://${gateway}:${bridgeServer.port}/control`,
      );
      expect(control).toBe(`hello from ${gateway}\n`);
      const r = await exec(
        leaseId,
        `curl -sS --noproxy '*' --max-time 5 http://${gateway}:${bridgeServer.port}/bypass 2>&1; echo " exit=$?"`,
      );
      expect(r.stdout).toMatch(/exit=7/);
      const viaProxy = await exec(leaseId, `curl -sS -o /dev/null -w '%{http_code}' http://${gateway}:${bridgeServer.port}/via-proxy`);
      expect(viaProxy.stdout).toBe('403');
      expect(bridgeServer.hits).toEqual(['GET /control']);
    } finally {
      bridgeServer.server.close();
    }
  });

  it('the proxy socket is gone after release, and the egress log stays readable', async () => {
    const lease = await h.client.createSandbox({ policy: 'egress-test' });
    const socketDir = join(h.config.dataDir, 'egress', lease.id);
    const { existsSync } = await import('node:fs');
    expect(existsSync(join(socketDir, 'proxy.sock'))).toBe(true);
    await exec(lease.id, `curl -sS -o /dev/null http://api.allowed.test:${allowed.port}/`);
    await h.client.releaseSandbox(lease.id);
    expect(existsSync(socketDir)).toBe(false);
    expect((await h.client.egress(lease.id)).map((e) => e.decision)).toEqual(['allowed']);
  });
});

describe('network mode none', () => {
  it('has no proxy, no egress log entries and no way out: curl through the would-be proxy port fails', async () => {
    const lease = await h.client.createSandbox();
    const r = await exec(
      lease.id,
      `printenv HTTP_PROXY; curl -sS -x http://127.0.0.1:3128 --max-time 5 http://api.allowed.test:${allowed.port}/ 2>&1; echo " exit=$?"`,
    );
    expect(r.stdout).toMatch(/exit=7/);
    expect(r.stdout).not.toContain('hello');
    expect(await h.client.egress(lease.id)).toEqual([]);
    expect(lease.manifest!.network).toEqual({ mode: 'none', allowlistDigest: null });
  });
});

describe('network mode open', () => {
  const LINK_LOCAL = '169.254.77.1';
  let linkLocal: Destination;
  let anyAddress: Destination;

  beforeAll(async () => {
    const { execFile } = await import('node:child_process');
    const run = (await import('node:util')).promisify(execFile);
    // On the host's loopback interface: a local address, so this traffic never leaves the machine.
    await run('ip', ['addr', 'add', `${LINK_LOCAL}/32`, 'dev', 'lo']);
    linkLocal = await destination(LINK_LOCAL);
    anyAddress = await destination('0.0.0.0');
  });
  afterAll(async () => {
    linkLocal?.server.close();
    anyAddress?.server.close();
    const { execFile } = await import('node:child_process');
    await (
      await import('node:util')
    )
      .promisify(execFile)('ip', ['addr', 'del', `${LINK_LOCAL}/32`, 'dev', 'lo'])
      .catch(() => undefined);
  });

  it('has an ordinary network of its own, but a link-local server, reachable from a plain container, gets nothing from it', async () => {
    const lease = await h.client.createSandbox({ policy: 'open-test' });
    expect(lease.manifest!.network).toEqual({ mode: 'open', allowlistDigest: null });
    const gateway = (await exec(lease.id, "ip -4 route | awk '/^default/ {print $3}'")).stdout.trim();
    expect(gateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const out = await exec(lease.id, `curl -sS --max-time 5 http://${gateway}:${anyAddress.port}/from-open`);
    expect(out.stdout).toBe('hello from 0.0.0.0\n');
    expect(anyAddress.hits).toEqual(['GET /from-open']);

    const control = await docker(
      'run',
      '--rm',
      '--network',
      'bridge',
      '--entrypoint',
      'curl',
      lease.image,
      '-sS',
      '--max-time',
      '5',
      `http://${LINK_LOCAL}:${linkLocal.port}/control`,
    );
    expect(control).toBe(`hello from ${LINK_LOCAL}\n`);
    const blocked = await exec(lease.id, `curl -sS --max-time 3 http://${LINK_LOCAL}:${linkLocal.port}/from-open 2>&1; echo " exit=$?"`);
    expect(blocked.stdout).toMatch(/exit=28/);
    expect(linkLocal.hits).toEqual(['GET /control']);
  });

  it('its network and bridge go with the lease', async () => {
    const lease = await h.client.createSandbox({ policy: 'open-test' });
    expect((await docker('network', 'ls', '-q', '--filter', `name=sbx-${lease.id}`)).trim()).not.toBe('');
    await h.client.releaseSandbox(lease.id);
    expect((await docker('network', 'ls', '-q', '--filter', `name=sbx-${lease.id}`)).trim()).toBe('');
  });
});
