/**
 * A running sandbox's policy changing in place, against real containers and the egress proxy
 * (issue 16 parts 3 and 4): phases moving forward (a setup phase with the network and a secret,
 * then an agent phase with neither) and an admin moving a lease to another version of its
 * policy. The "internet" is an HTTP server of the test's own on 127.0.0.2, names from the test's
 * DNS server.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { CallView } from '../contract/objects.js';
import {
  agentPidOf,
  apiAs,
  eventually,
  execIn,
  REPO_ROOT,
  startHarness,
  startTestDns,
  useScratchDirs,
  type Harness,
  type TestDns,
} from './fixtures/index.js';

const scratch = useScratchDirs();
let h: Harness;
let server: Server;
let port: number;
const hits: string[] = [];
let dns: TestDns;
const exec = execIn(() => h.client, { args: { timeoutMs: 30_000 } });
const api = apiAs(() => h.url);

beforeAll(async () => {
  server = createServer((req, res) => {
    hits.push(`${req.headers.host} ${req.url}`);
    res.end('hello\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.2', resolve));
  port = (server.address() as AddressInfo).port;
  dns = await startTestDns({ 'a.phase.test': '127.0.0.2', 'b.phase.test': '127.0.0.2' });
  const dir = await scratch('sbx-policy-change-');
  const defaults = parseYaml(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  const loopback = { cidr: '127.0.0.2/32', ports: [port] };
  const allow = (...hosts: string[]) => [...hosts.map((host) => ({ host, ports: [port] })), loopback];
  const write = (file: string, policy: object) => writeFile(join(dir, file), JSON.stringify({ ...defaults, ...policy }));
  await write('default.yaml', {});
  await write('phased.yaml', {
    name: 'phased',
    version: 1,
    network: { mode: 'allowlist', allow: allow('a.phase.test') },
    secrets: { allowed: ['NPM_TOKEN'] },
    phases: [
      { name: 'setup', network: { mode: 'allowlist', allow: allow('a.phase.test') }, secrets: { allowed: ['NPM_TOKEN'] } },
      { name: 'agent', network: { mode: 'none' } },
    ],
  });
  await write('live-1.yaml', { name: 'live', version: 1, network: { mode: 'allowlist', allow: allow('a.phase.test') } });
  await write('live-2.yaml', { name: 'live', version: 2, network: { mode: 'allowlist', allow: allow('a.phase.test', 'b.phase.test') } });
  await write('live-3.yaml', {
    name: 'live',
    version: 3,
    network: { mode: 'allowlist', allow: allow('a.phase.test') },
    resources: { ...defaults.resources, pids: 300 },
  });
  await write('live-4.yaml', { name: 'live', version: 4, network: { mode: 'none', allow: [] } });
  await write('learn.yaml', {
    name: 'learn',
    version: 1,
    network: {
      mode: 'allowlist',
      allow: [{ host: 'a.phase.test', ports: [port], http: { allow: [{ methods: ['GET'] }] } }, loopback],
    },
  });
  h = await startHarness({ SBX_POLICY_DIR: dir, SBX_EGRESS_DNS_SERVERS: dns.address });
  await h.client.putSecret('NPM_TOKEN', 'npm-phase-value');
}, 120_000);

afterAll(async () => {
  await h?.close();
  server?.close();
  await dns?.close();
});

const curl = async (leaseId: string, host: string): Promise<string> =>
  (await exec(leaseId, `curl -s -o /dev/null -w '%{http_code}' http://${host}:${port}/x`)).stdout;

describe('phases: a lease starts in the first and moves forward only', () => {
  it('the setup phase has the network and the secret; moving to the agent phase cuts the open tunnel, denies the network and withdraws the secret', async () => {
    const lease = await h.client.createSandbox({ policy: 'phased', secrets: [{ name: 'NPM_TOKEN' }] });
    expect([lease.phase, lease.manifest!.phase, lease.manifestHistory]).toEqual(['setup', 'setup', []]);
    expect(await curl(lease.id, 'a.phase.test')).toBe('200');
    expect((await exec(lease.id, { cmd: 'printf %s "${#NPM_TOKEN}"', secrets: ['NPM_TOKEN'] })).stdout).toBe('15');
    // A tunnel held open through the proxy, which says when it is cut.
    const hold = [
      'import socket, sys',
      's = socket.create_connection(("127.0.0.1", 3128))',
      `s.sendall(b"CONNECT a.phase.test:${port} HTTP/1.1\\r\\nHost: a.phase.test\\r\\n\\r\\n")`,
      'print(s.recv(200).split(b"\\r\\n")[0].decode(), flush=True)',
      'print("cut" if s.recv(100) == b"" else "data", flush=True)',
    ].join('\n');
    const held = await h.client.submitCall(
      lease.id,
      'exec',
      { argv: ['python3', '-c', hold], background: true, timeoutMs: 60_000 },
      { waitSeconds: 30 },
    );
    expect(held.status).toBe('detached');
    // The tunnel is up once the process printed the proxy's answer.
    for await (const e of h.client.events(lease.id, held.callId)) if (e.type === 'output') break;

    const moved = (await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/phase`, { name: 'agent' })).body;
    expect(moved).toMatchObject({ phase: 'agent', manifest: { phase: 'agent' } });
    expect(moved.manifest.digest).not.toBe(lease.manifest!.digest);
    expect(moved.manifestHistory).toEqual([
      { digest: lease.manifest!.digest, policy: lease.policy, phase: 'setup', until: expect.any(String), reason: 'phase_moved' },
    ]);
    const ended = (await eventually(
      () => h.client.getCall(lease.id, held.callId),
      (c) => c.status === 'finished',
      15_000,
    )) as CallView;
    expect(ended.result!.stdout).toBe('HTTP/1.1 200 Connection Established\ncut\n');
    expect(await curl(lease.id, 'a.phase.test')).toBe('403');
    const withdrawn = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/calls?wait=30`, {
      tool: 'exec',
      args: { argv: ['true'], secrets: ['NPM_TOKEN'] },
    });
    expect([withdrawn.status, withdrawn.body.error.code, withdrawn.body.error.details.withdrawn]).toEqual([
      403,
      'policy.secret_denied',
      true,
    ]);
    // A later call's receipt binds the new manifest.
    expect((await exec(lease.id, 'true')).receipt!.manifestDigest).toBe(moved.manifest.digest);
    expect((await h.client.leaseEvents(lease.id)).at(-1)).toMatchObject({ from: 'ready', to: 'ready', reason: 'phase_moved' });
    const audit = (await api(h.apiKey, 'GET', `/v1/audit?action=lease.phase_move&target=lease:${lease.id}`)).body.entries;
    expect(audit).toMatchObject([{ beforeDigest: lease.manifest!.digest, afterDigest: moved.manifest.digest }]);
    await h.client.releaseSandbox(lease.id);
  });

  it('a call accepted before the move that no agent took yet ends denied (withdrawn) with nothing run; one without the secret runs', async () => {
    const lease = await h.client.createSandbox({ policy: 'phased', secrets: [{ name: 'NPM_TOKEN' }] });
    // The agent stopped (as a busy or slow one would be): the calls stay in the lease's inbox, untaken.
    const agent = await agentPidOf(lease.id);
    process.kill(agent, 'SIGSTOP');
    let stopped = true;
    try {
      const submit = (callId: string, cmd: string, secrets?: string[]) =>
        api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/calls`, { tool: 'exec', args: { cmd, ...(secrets ? { secrets } : {}) }, callId });
      expect((await submit('with-secret', 'touch /workspace/ran-with-secret', ['NPM_TOKEN'])).body.status).toBe('queued');
      expect((await submit('without-secret', 'touch /workspace/ran-without')).body.status).toBe('queued');
      expect((await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/phase`, { name: 'agent' })).status).toBe(200);
      expect((await h.client.getCall(lease.id, 'with-secret')).result).toMatchObject({
        status: 'denied',
        error: { code: 'policy.secret_denied', details: { name: 'NPM_TOKEN', withdrawn: true } },
        receipt: null,
      });
      process.kill(agent, 'SIGCONT');
      stopped = false;
      const ran = (await eventually(
        () => h.client.getCall(lease.id, 'without-secret'),
        (c) => c.status === 'finished',
        30_000,
      )) as CallView;
      expect(ran.result!.status).toBe('succeeded');
      expect((await exec(lease.id, 'ls /workspace')).stdout).toBe('ran-without\n');
      const audit = (await api(h.apiKey, 'GET', `/v1/audit?action=lease.phase_move&target=lease:${lease.id}`)).body.entries;
      expect(audit).toMatchObject([{ details: { callsDenied: ['with-secret'] } }]);
    } finally {
      if (stopped) process.kill(agent, 'SIGCONT');
      await h.client.releaseSandbox(lease.id);
    }
  });

  it('a phase behind or the current one is 409 lease.phase_behind, an unknown one 400 lease.phase_unknown; nothing changes', async () => {
    const lease = await h.client.createSandbox({ policy: 'phased' });
    expect((await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/phase`, { name: 'setup' })).body.error).toMatchObject({
      code: 'lease.phase_behind',
      details: { current: 'setup' },
    });
    expect((await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/phase`, { name: 'deploy' })).body.error).toMatchObject({
      code: 'lease.phase_unknown',
      details: { phases: ['setup', 'agent'] },
    });
    const plain = await h.client.createSandbox({ policy: 'live' });
    expect((await api(h.apiKey, 'POST', `/v1/sandboxes/${plain.id}/phase`, { name: 'agent' })).status).toBe(400);
    expect((await h.client.getSandbox(lease.id)).manifest!.digest).toBe(lease.manifest!.digest);
    await Promise.all([h.client.releaseSandbox(lease.id), h.client.releaseSandbox(plain.id)]);
  });
});

describe('live policy change: an admin moves a running lease to another version', () => {
  it('the network section applies at once; a version that changes resources is 409 policy.not_live_changeable naming it; a user key is 403', async () => {
    const lease = await h.client.createSandbox({ policy: { name: 'live', version: 1 } });
    expect(await curl(lease.id, 'b.phase.test')).toBe('403');
    const changed = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/policy`, { version: 2 });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({
      policy: { name: 'live', version: 2 },
      manifestHistory: [{ reason: 'policy_changed', policy: { version: 1 } }],
    });
    expect(await curl(lease.id, 'b.phase.test')).toBe('200');

    const refused = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/policy`, { version: 3 });
    expect([refused.status, refused.body.error.code, refused.body.error.details.sections]).toEqual([
      409,
      'policy.not_live_changeable',
      ['resources'],
    ]);
    expect((await h.client.getSandbox(lease.id)).policy.version).toBe(2);
    // The network's mode is made with the sandbox (found by review): from allowlist to none is refused, the proxy unchanged.
    const mode = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/policy`, { version: 4 });
    expect([mode.status, mode.body.error.details.sections]).toEqual([409, ['network.mode']]);
    expect(await curl(lease.id, 'b.phase.test')).toBe('200');

    const user = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'phase user', role: 'user', tenant: 'default' })).body
      .secret as string;
    expect((await api(user, 'POST', `/v1/sandboxes/${lease.id}/policy`, { version: 1 })).body.error.code).toBe('auth.admin_required');
    const audit = (await api(h.apiKey, 'GET', `/v1/audit?action=lease.policy_change&target=lease:${lease.id}`)).body.entries;
    expect(audit).toHaveLength(1);
    await h.client.releaseSandbox(lease.id);
  });
});

describe('live policy change with two control planes', () => {
  it('a change made through the replica that does not serve the lease reaches the one that does: its proxy follows within a reconcile round', async () => {
    const lease = await h.client.createSandbox({ policy: { name: 'live', version: 1 } });
    expect(await curl(lease.id, 'b.phase.test')).toBe('403');
    const peer = await h.startPeer();
    try {
      // This process consumes the lease's returns and serves its egress proxy; the peer only writes the record.
      const changed = await apiAs(() => peer.client.baseUrl)(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/policy`, { version: 2 });
      expect([changed.status, changed.body.policy.version]).toEqual([200, 2]);
      await eventually(
        () => curl(lease.id, 'b.phase.test'),
        (code) => code === '200',
        15_000,
      );
    } finally {
      await peer.close();
      await h.client.releaseSandbox(lease.id);
    }
  });
});

describe('from denial to proposal to a new version', () => {
  it('denied egress becomes the smallest allowlist change with its evidence; accepting writes the next version (compare-and-swap), audited', async () => {
    const lease = await h.client.createSandbox({ policy: 'learn' });
    expect(await curl(lease.id, 'b.phase.test')).toBe('403');
    const post = await exec(lease.id, `curl -s -o /dev/null -w '%{http_code}' -X POST http://a.phase.test:${port}/submit`);
    expect(post.stdout).toBe('403');
    expect((await exec(lease.id, `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.3:${port}/`)).stdout).toBe('403');

    const proposal = (await api(h.apiKey, 'GET', '/v1/policies/learn/proposals')).body;
    expect(proposal).toMatchObject({
      policy: { name: 'learn', version: 1 },
      changes: [
        {
          kind: 'add_host',
          host: 'b.phase.test',
          ports: [port],
          denials: 1,
          evidence: [{ leaseId: lease.id, callId: expect.stringMatching(/^call_/), method: 'GET' }],
        },
        { kind: 'add_http_allow', ruleIndex: 0, host: 'a.phase.test', methods: ['POST'], paths: ['/submit'], denials: 1 },
      ],
      notProposed: [{ reason: expect.stringContaining('IP address'), denials: 1 }],
    });
    const accept = async (version: number, digest: string) =>
      api(h.apiKey, 'POST', '/v1/policies/learn/proposals/accept', { version, digest });
    expect((await accept(2, proposal.digest)).body.error.code).toBe('policy.version_conflict');
    // What is written is what was reviewed: another digest is refused.
    expect((await accept(1, 'sha256:0')).body.error.code).toBe('policy.version_conflict');
    const accepted = await accept(1, proposal.digest);
    expect([accepted.status, accepted.body.version]).toEqual([201, 2]);

    // The next lease runs version 2: what was denied goes through, and nothing is left to propose.
    const next = await h.client.createSandbox({ policy: 'learn' });
    expect(next.policy.version).toBe(2);
    expect(await curl(next.id, 'b.phase.test')).toBe('200');
    expect((await exec(next.id, `curl -s -o /dev/null -w '%{http_code}' -X POST http://a.phase.test:${port}/submit`)).stdout).toBe('200');
    expect((await api(h.apiKey, 'GET', '/v1/policies/learn/proposals')).body.changes).toEqual([]);
    const none = (await api(h.apiKey, 'GET', '/v1/policies/learn/proposals')).body.digest as string;
    expect((await accept(2, none)).body.error.code).toBe('policy.nothing_proposed');
    const audit = (await api(h.apiKey, 'GET', '/v1/audit?action=policy.proposal_accept&target=policy:learn')).body.entries;
    expect(audit).toMatchObject([{ afterDigest: accepted.body.digest, details: { version: 2 } }]);
    await Promise.all([h.client.releaseSandbox(lease.id), h.client.releaseSandbox(next.id)]);
  });
});
