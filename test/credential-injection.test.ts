/**
 * Credential injection (policy `secrets.inject`, issue 16 part 1) against a real sandbox: the
 * sandbox holds placeholders, the egress proxy intercepts the rules' hosts with the lease's own
 * CA and puts the values in, for curl, Python's urllib, Node's fetch and git over HTTPS. The
 * "internet" is this machine: HTTPS servers of the test's own CA on 127.0.0.2, names served by a
 * DNS server of the test. The proof that the value never enters the sandbox: every process's
 * environment, every file, and the memory of a process that used the placeholder are searched.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestCa,
  docker,
  execIn,
  startHarness,
  startHttpsUpstream,
  startTestDns,
  useScratchDirs,
  type Harness,
  type HttpsUpstream,
  type TestDns,
} from './fixtures/index.js';

const scratch = useScratchDirs();
const GH_VALUE = 'ghp_realvalue_8d1f0c5b7a';
const API_VALUE = 'api-real "value" 42';
const NAMES: Record<string, string> = {
  'api.upstream.test': '127.0.0.2',
  'git.upstream.test': '127.0.0.2',
  'other.upstream.test': '127.0.0.2',
};

let h: Harness;
let api: HttpsUpstream;
let git: HttpsUpstream;
let dns: TestDns;
let leaseId: string;
let testCaFile: string;
const exec = execIn(() => h.client, { args: { timeoutMs: 60_000 } });

beforeAll(async () => {
  const ca = await createTestCa();
  const dir = await scratch('sbx-inject-');
  testCaFile = join(dir, 'upstream-ca.pem');
  await writeFile(testCaFile, ca.certPem);
  api = await startHttpsUpstream({ host: '127.0.0.2', hostNames: ['api.upstream.test', 'other.upstream.test'], ca });
  git = await startHttpsUpstream({
    host: '127.0.0.2',
    hostNames: ['git.upstream.test'],
    ca,
    requireAuthorization: `Basic ${Buffer.from(`x-access-token:${GH_VALUE}`).toString('base64')}`,
  });
  dns = await startTestDns(NAMES);
  const ports = [api.port, git.port];
  const policyDir = await scratch('sbx-inject-policies-');
  const yaml = await import('yaml');
  const { readFile } = await import('node:fs/promises');
  const { REPO_ROOT } = await import('./fixtures/index.js');
  const defaults = yaml.parse(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  await writeFile(join(policyDir, 'default.yaml'), JSON.stringify(defaults));
  await writeFile(
    join(policyDir, 'inject.yaml'),
    JSON.stringify({
      ...defaults,
      name: 'inject',
      version: 1,
      network: {
        mode: 'allowlist',
        allow: [
          { host: 'api.upstream.test', ports },
          { host: 'git.upstream.test', ports },
          { host: 'other.upstream.test', ports },
          // The servers are on loopback, which a host rule alone never reaches.
          { cidr: '127.0.0.2/32', ports },
        ],
      },
      secrets: {
        allowed: ['GH_TOKEN', 'API_KEY'],
        inject: [
          { secret: 'GH_TOKEN', hosts: ['api.upstream.test'], in: 'header', name: 'Authorization', template: 'Bearer {value}' },
          { secret: 'GH_TOKEN', hosts: ['git.upstream.test'], in: 'header', name: 'Authorization' },
          { secret: 'API_KEY', hosts: ['api.upstream.test'], in: 'query', name: 'key' },
          { secret: 'API_KEY', hosts: ['api.upstream.test'], in: 'body' },
        ],
      },
    }),
  );
  await writeFile(
    join(policyDir, 'l7.yaml'),
    JSON.stringify({
      ...defaults,
      name: 'l7',
      version: 1,
      network: {
        mode: 'allowlist',
        allow: [
          {
            host: 'api.upstream.test',
            ports,
            http: {
              allow: [{ methods: ['GET', 'HEAD'] }, { methods: ['POST'], paths: ['/repos/acme/app/pulls'] }],
              deny: [{ paths: ['/admin/**'] }],
            },
          },
          { cidr: '127.0.0.2/32', ports },
        ],
      },
    }),
  );
  h = await startHarness({ SBX_POLICY_DIR: policyDir, SBX_EGRESS_DNS_SERVERS: dns.address, SBX_EGRESS_UPSTREAM_CA: testCaFile });
  await h.client.putSecret('GH_TOKEN', GH_VALUE);
  await h.client.putSecret('API_KEY', API_VALUE);
  leaseId = (await h.client.createSandbox({ policy: 'inject', secrets: [{ name: 'GH_TOKEN' }, { name: 'API_KEY' }] })).id;
}, 120_000);

afterAll(async () => {
  await h?.close();
  await api?.close();
  await git?.close();
  await dns?.close();
});

const url = (host: string, path: string): string => `https://${host}:${api.port}${path}`;
/** Requests the api upstream received since `from`. */
const since = (from: number) => api.requests.slice(from);

describe('credential injection: the sandbox holds a placeholder, the upstream gets the value', () => {
  it('curl: the placeholder in an Authorization header arrives as the value; the egress event names the secret, never the value', async () => {
    const from = api.requests.length;
    const r = await exec(leaseId, {
      // The call's output hides the secret's value as the sandbox holds it (the placeholder): its shape is printed instead.
      cmd: `printf '%s %s\\n' "\${GH_TOKEN:0:6}" "\${#GH_TOKEN}"; curl -sS --fail "${url('api.upstream.test', '/user')}" -H "Authorization: token $GH_TOKEN"`,
      secrets: ['GH_TOKEN'],
    });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe('sbxph_ 46');
    expect(since(from).map((q) => q.headers.authorization)).toEqual([`token ${GH_VALUE}`]);
    const event = (await h.client.egress(leaseId)).at(-1)!;
    expect(event).toMatchObject({
      host: 'api.upstream.test',
      method: 'GET',
      path: '/user',
      decision: 'allowed',
      callId: r.callId,
      credentialsInjected: [{ secret: 'GH_TOKEN', host: 'api.upstream.test', count: 1 }],
    });
    // The call's receipt says what went into its requests, by name and host.
    expect(r.receipt!.credentialsInjected).toEqual([{ secret: 'GH_TOKEN', host: 'api.upstream.test', count: 1 }]);
    expect(JSON.stringify(await h.client.egress(leaseId))).not.toContain(GH_VALUE);
    expect(JSON.stringify(r)).not.toContain(GH_VALUE);
  });

  it('a request without the header gets the template; the query parameter and a JSON body get the value (Python urllib)', async () => {
    const from = api.requests.length;
    const script = [
      'import json, os, urllib.request',
      'key = os.environ["API_KEY"]',
      `req = urllib.request.Request("${url('api.upstream.test', '/q')}?key=" + key, data=json.dumps({"k": key}).encode(), headers={"content-type": "application/json"})`,
      'print(urllib.request.urlopen(req, timeout=20).status)',
    ].join('\n');
    const r = await exec(leaseId, { argv: ['python3', '-c', script], secrets: ['API_KEY'] });
    expect([r.exitCode, r.stdout]).toEqual([0, '200\n']);
    const [q] = since(from);
    expect(q!.headers.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(q!.path).toBe(`/q?key=${encodeURIComponent(API_VALUE)}`);
    expect(JSON.parse(q!.body.toString())).toEqual({ k: API_VALUE });
    // Header (the template), query and body: each counted for the call that sent them.
    expect(r.receipt!.credentialsInjected).toEqual([
      { secret: 'API_KEY', host: 'api.upstream.test', count: 2 },
      { secret: 'GH_TOKEN', host: 'api.upstream.test', count: 1 },
    ]);
  });

  it('a 100 MB JSON body with the placeholder at its very end arrives whole, the value in its place (streamed, one chunk held)', async () => {
    const from = api.requests.length;
    const padBytes = 100 * 1000 * 1000;
    const script = [
      'import os, urllib.request',
      'key = os.environ["API_KEY"].encode()',
      `body = b'{"pad":"' + b"x" * ${padBytes} + b'","k":"' + key + b'"}'`,
      `req = urllib.request.Request("${url('api.upstream.test', '/big')}", data=body, headers={"content-type": "application/json"}, method="POST")`,
      'print(urllib.request.urlopen(req, timeout=120).status, len(body))',
    ].join('\n');
    const r = await exec(leaseId, { argv: ['python3', '-c', script], secrets: ['API_KEY'], timeoutMs: 120_000 }, { waitSeconds: 150 });
    expect(r.exitCode).toBe(0);
    const [status, sent] = r.stdout.trim().split(' ').map(Number);
    expect(status).toBe(200);
    const [q] = since(from);
    const value = JSON.stringify(API_VALUE).slice(1, -1);
    expect(q!.bodyTail.toString().endsWith(`","k":"${value}"}`)).toBe(true);
    expect(q!.bodyBytes).toBe(sent! - 'sbxph_'.length - 40 + Buffer.byteLength(value));
    expect(r.receipt!.credentialsInjected).toContainEqual({ secret: 'API_KEY', host: 'api.upstream.test', count: 1 });
  });

  it('Node fetch: a form body gets the value percent-encoded', async () => {
    const from = api.requests.length;
    const script = `const r = await fetch(${JSON.stringify(url('api.upstream.test', '/form'))}, { method: 'POST', body: new URLSearchParams({ k: process.env.API_KEY }) }); console.log(r.status);`;
    const r = await exec(leaseId, { argv: ['node', '--input-type=module', '-e', script], secrets: ['API_KEY'] });
    expect([r.exitCode, r.stdout, r.stderr]).toEqual([0, '200\n', '']);
    expect(new URLSearchParams(since(from)[0]!.body.toString()).get('k')).toBe(API_VALUE);
    expect(r.receipt!.credentialsInjected).toEqual([
      { secret: 'API_KEY', host: 'api.upstream.test', count: 1 },
      { secret: 'GH_TOKEN', host: 'api.upstream.test', count: 1 },
    ]);
  });

  it('git clone over HTTPS with the placeholder as the password: the server that wants the real value serves the clone', async () => {
    const r = await exec(leaseId, {
      cmd: `cd /tmp && rm -rf repo && GIT_TERMINAL_PROMPT=0 git clone -q "https://x-access-token:$GH_TOKEN@git.upstream.test:${git.port}/git/repo.git" repo && cat repo/README.md`,
      secrets: ['GH_TOKEN'],
    });
    expect([r.exitCode, r.stdout]).toEqual([0, 'hello from upstream\n']);
    expect(git.requests.length).toBeGreaterThan(0);
    expect(r.receipt!.credentialsInjected).toEqual([{ secret: 'GH_TOKEN', host: 'git.upstream.test', count: expect.any(Number) }]);
  });
});

describe('what is never done', () => {
  it('a placeholder in a place no rule names is sent as it is and logged as stray', async () => {
    const from = api.requests.length;
    const r = await exec(leaseId, {
      cmd: `curl -sS --fail "${url('api.upstream.test', '/leak/')}$GH_TOKEN" -H 'Authorization: mine'`,
      secrets: ['GH_TOKEN'],
    });
    expect(r.exitCode).toBe(0);
    const [q] = since(from);
    expect(q!.path).toMatch(/^\/leak\/sbxph_[0-9a-f]{40}$/);
    expect(q!.headers.authorization).toBe('mine');
    expect((await h.client.egress(leaseId)).at(-1)).toMatchObject({
      path: expect.stringMatching(/^\/leak\//),
      strayPlaceholders: ['GH_TOKEN'],
    });
  });

  it('a host without a rule is tunnelled, not intercepted: it receives the placeholder', async () => {
    const from = api.requests.length;
    await exec(leaseId, {
      cmd: `cat > /tmp/upstream-ca.pem <<'EOF'\n${await (await import('node:fs/promises')).readFile(testCaFile, 'utf8')}EOF`,
    });
    const r = await exec(leaseId, {
      cmd: `curl -sS --fail --cacert /tmp/upstream-ca.pem "https://other.upstream.test:${api.port}/x" -H "Authorization: Bearer $GH_TOKEN"`,
      secrets: ['GH_TOKEN'],
    });
    expect(r.exitCode).toBe(0);
    expect(since(from)[0]!.headers.authorization).toMatch(/^Bearer sbxph_[0-9a-f]{40}$/);
    expect((await h.client.egress(leaseId)).at(-1)).toMatchObject({ host: 'other.upstream.test', method: 'CONNECT' });
  });

  it('a client that does not trust the lease CA (pinning) fails closed: nothing reaches the server, the event says why', async () => {
    const from = api.requests.length;
    const r = await exec(leaseId, { cmd: `curl -sS --cacert /tmp/upstream-ca.pem "${url('api.upstream.test', '/pinned')}"` });
    expect(r.exitCode).not.toBe(0);
    expect(since(from)).toEqual([]);
    expect((await h.client.egress(leaseId)).at(-1)).toMatchObject({
      host: 'api.upstream.test',
      method: 'CONNECT',
      error: expect.stringContaining('tls:'),
    });
  });

  it('a WebSocket upgrade to an intercepted host is refused with 501 and never reaches it', async () => {
    const from = api.requests.length;
    const r = await exec(leaseId, {
      cmd: `curl -sS -o /dev/null -w '%{http_code}' "${url('api.upstream.test', '/ws')}" -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='`,
    });
    expect(r.stdout).toBe('501');
    expect(since(from)).toEqual([]);
  });

  it('a client asking for HTTP/2 is offered HTTP/1.1 only (ALPN) and falls back: the request goes through, injected', async () => {
    const from = api.requests.length;
    const r = await exec(leaseId, {
      cmd: `curl -sS --http2 -o /dev/null -w '%{http_version} %{http_code}' "${url('api.upstream.test', '/h2')}"`,
    });
    expect(r.stdout).toBe('1.1 200');
    expect(since(from).map((q) => [q.path, q.httpVersion, q.headers.authorization])).toEqual([['/h2', '1.1', `Bearer ${GH_VALUE}`]]);
  });

  it('the value is in no process environment, no file and not in the memory of a process that used the placeholder', async () => {
    const container = `sbx-${leaseId}`;
    // As root in the sandbox: every process's environment, then every file outside /proc and /sys.
    const environ = await docker('exec', '-u', '0', container, 'sh', '-c', 'cat /proc/[0-9]*/environ | tr "\\0" "\\n"');
    expect(environ).not.toContain(GH_VALUE);
    const files = await docker(
      'exec',
      '-u',
      '0',
      container,
      'sh',
      '-c',
      `grep -rIl --exclude-dir=proc --exclude-dir=sys -F '${GH_VALUE}' / || true`,
    );
    expect(files.trim()).toBe('');
    // A process that sent the placeholder through the proxy has its whole memory read by its
    // parent (as a core dump would hold it): the placeholder is there (the search works), the
    // value is not. The parent gets the value reversed, so the child never holds it at all.
    const child = [
      'import os, sys, urllib.request',
      `urllib.request.urlopen(urllib.request.Request("${url('api.upstream.test', '/mem')}", headers={"authorization": "token " + os.environ["GH_TOKEN"]}), timeout=20).read()`,
      'print("ready", flush=True)',
      'sys.stdin.read()',
    ].join('\n');
    const scan = [
      'import os, re, subprocess, sys',
      'needles = {"placeholder": os.environ["GH_TOKEN"].encode(), "value": sys.argv[2][::-1].encode()}',
      'p = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)',
      'assert p.stdout.readline().strip() == b"ready"',
      'found = {k: 0 for k in needles}',
      'mem = open(f"/proc/{p.pid}/mem", "rb", 0)',
      'for line in open(f"/proc/{p.pid}/maps"):',
      '    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)',
      '    if not m: continue',
      '    start, end = int(m.group(1), 16), int(m.group(2), 16)',
      '    try:',
      '        mem.seek(start); chunk = mem.read(end - start)',
      '    except (OSError, OverflowError, ValueError): continue',
      '    for k, n in needles.items(): found[k] += chunk.count(n)',
      'p.stdin.close(); p.wait()',
      'print(found["placeholder"] > 0, found["value"])',
    ].join('\n');
    const r = await exec(leaseId, { argv: ['python3', '-c', scan, child, [...GH_VALUE].reverse().join('')], secrets: ['GH_TOKEN'] });
    expect([r.exitCode, r.stdout]).toEqual([0, 'True 0\n']);
  });
});

describe('L7 rules: method and path, decided on the decrypted request', () => {
  let l7Id: string;
  beforeAll(async () => {
    l7Id = (await h.client.createSandbox({ policy: 'l7' })).id;
  });
  const status = async (method: string, path: string): Promise<string> =>
    (await exec(l7Id, { cmd: `curl -sS -o /dev/null -w '%{http_code}' -X ${method} --path-as-is "${url('api.upstream.test', path)}"` }))
      .stdout;

  it('GET anywhere and POST to the one path pass; another POST, a denied path and a path with dot segments get 403 and reach nothing', async () => {
    const from = api.requests.length;
    expect(await status('GET', '/repos/acme/app')).toBe('200');
    expect(await status('POST', '/repos/acme/app/pulls')).toBe('200');
    expect(since(from).map((q) => `${q.method} ${q.path}`)).toEqual(['GET /repos/acme/app', 'POST /repos/acme/app/pulls']);
    const denied = api.requests.length;
    expect(await status('POST', '/repos/acme/app/issues')).toBe('403');
    expect(await status('GET', '/admin/users')).toBe('403');
    expect(await status('GET', '/repos/acme/app/../../../admin/users')).toBe('403');
    expect(since(denied)).toEqual([]);
    const events = (await h.client.egress(l7Id, { decision: 'denied' })).slice(-3);
    expect(events.map((e) => [e.method, e.path, e.rule.replace(/.* http/, 'http')])).toEqual([
      ['POST', '/repos/acme/app/issues', 'http: no allow entry matches POST /repos/acme/app/issues'],
      ['GET', '/admin/users', 'http.deny[0]'],
      ['GET', '/repos/acme/app/../../../admin/users', 'http: path not in normal form'],
    ]);
  });
});
