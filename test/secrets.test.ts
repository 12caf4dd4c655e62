/**
 * Secrets end to end: the store (encrypted in Redis, metadata only over the API), leases asking
 * for secrets under the shipped `offline-ci` policy, delivery to the calls that ask (env and a
 * file on the secrets tmpfs), redaction of every value in what leaves the sandbox, and the
 * places a value must never reach (container config, manifest, receipts, events, Redis).
 * Real Docker engine, real Redis.
 */
import { createHash, randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { SbxError } from '../sdk/index.js';
import type { CallEvent } from '../contract/events.js';
import type { ToolResult } from '../contract/objects.js';
import { containersOf, docker, reassemble, runCli, useHarness, execIn, type CliRun } from './fixtures/index.js';

const h = useHarness();
const execInLease = execIn(() => h.client, { waitSeconds: 120 });
let leaseId: string;
const npmToken = `npm_${randomBytes(18).toString('hex')}`;
const githubToken = `ghp_${randomBytes(18).toString('hex')}`;
const NPM = '[REDACTED:NPM_TOKEN]';
const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

const exec = (args: Record<string, unknown>): Promise<ToolResult> => execInLease(leaseId, args);

async function eventsOf(callId: string): Promise<CallEvent[]> {
  const events: CallEvent[] = [];
  for await (const e of h.client.events(leaseId, callId)) events.push(e);
  return events;
}

async function apiError(p: Promise<unknown>): Promise<SbxError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof SbxError)) throw new Error(`expected an API error, got ${String(err)}`);
  return err;
}

/** The value and its base64 forms at each byte alignment (output events carry base64). */
function formsOf(value: string): string[] {
  const bytes = Buffer.from(value);
  return [
    value,
    ...[0, 1, 2].map((k) =>
      Buffer.concat([Buffer.alloc(k), bytes])
        .toString('base64')
        .slice(4, -4),
    ),
  ];
}

/** Every key under the harness's prefix with its whole content, as text. */
async function redisDump(): Promise<string> {
  const parts: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await h.redis.scan(cursor, 'MATCH', `${h.config.redisPrefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const type = await h.redis.type(key);
      const content =
        type === 'string'
          ? await h.redis.get(key)
          : type === 'hash'
            ? await h.redis.hgetall(key)
            : type === 'list'
              ? await h.redis.lrange(key, 0, -1)
              : type === 'set'
                ? await h.redis.smembers(key)
                : type === 'zset'
                  ? await h.redis.zrange(key, 0, -1)
                  : type === 'stream'
                    ? await h.redis.xrange(key, '-', '+')
                    : null;
      parts.push(`${key} ${JSON.stringify(content)}`);
    }
  } while (cursor !== '0');
  return parts.join('\n');
}

function expectNoValue(text: string, where: string): void {
  for (const value of [npmToken, githubToken]) {
    for (const form of formsOf(value)) {
      if (text.includes(form)) throw new Error(`${where} holds a secret value (form ${form.slice(0, 6)}…)`);
    }
  }
}

/** The built `sbx` CLI against the harness, fed `stdin`. */
const sbx = (args: string[], stdin = ''): Promise<CliRun> => runCli(h, args, stdin);

beforeAll(async () => {
  await h.client.putSecret('NPM_TOKEN', npmToken);
  await h.client.putSecret('GITHUB_TOKEN', githubToken);
  const lease = await h.client.createSandbox({
    policy: 'offline-ci',
    secrets: [{ name: 'NPM_TOKEN' }, { name: 'GITHUB_TOKEN', env: 'GH_TOKEN', file: '/run/secrets/github' }],
  });
  leaseId = lease.id;
});

describe('secret store API', () => {
  it('PUT answers metadata only (201, then 200 with the next version); GET and list show metadata only; Redis holds no plaintext', async () => {
    const value = `store-test-${randomBytes(12).toString('hex')}`;
    const put = await h.client.raw('PUT', '/v1/secrets/STORE_TEST', {
      body: JSON.stringify({ value }),
      headers: { 'content-type': 'application/json' },
    });
    expect(put.status).toBe(201);
    const created = (await put.json()) as Record<string, unknown>;
    expect(Object.keys(created).sort()).toEqual(['createdAt', 'name', 'sizeBytes', 'updatedAt', 'updatedBy', 'version']);
    expect(created).toMatchObject({ name: 'STORE_TEST', version: 1, updatedBy: 'bootstrap', sizeBytes: value.length });
    const again = await h.client.raw('PUT', '/v1/secrets/STORE_TEST', {
      body: JSON.stringify({ value: `${value}-2` }),
      headers: { 'content-type': 'application/json' },
    });
    expect(again.status).toBe(200);
    const second = (await again.json()) as Record<string, unknown>;
    expect(second).toMatchObject({ version: 2, createdAt: created.createdAt });
    const one = await h.client.getSecret('STORE_TEST');
    expect(one).toEqual(second);
    const list = await h.client.listSecrets();
    expect(list.map((s) => s.name)).toEqual(['GITHUB_TOKEN', 'NPM_TOKEN', 'STORE_TEST']);
    const texts = [JSON.stringify(one), JSON.stringify(list), await redisDump()];
    for (const text of texts) {
      expect(text).not.toContain(value);
      expect(text).not.toContain(Buffer.from(value).toString('base64'));
    }
    expectNoValue(await redisDump(), 'Redis');
  });

  it('DELETE removes a secret and is idempotent; GET of a missing one is 404 secret.not_found', async () => {
    await h.client.putSecret('GONE', 'x-value');
    await h.client.deleteSecret('GONE');
    await h.client.deleteSecret('GONE');
    const err = await apiError(h.client.getSecret('GONE'));
    expect([err.status, err.code]).toEqual([404, 'secret.not_found']);
    expect((await h.client.listSecrets()).map((s) => s.name)).not.toContain('GONE');
  });

  it('bad names and values are 400 input.invalid naming the field, never 500', async () => {
    const cases: Array<[string, unknown, string]> = [
      ['/v1/secrets/bad%20name', { value: 'x' }, 'params.name'],
      ['/v1/secrets/OK', { value: '' }, 'body.value'],
      ['/v1/secrets/OK', { value: 'a\u0000b' }, 'body.value'],
      ['/v1/secrets/OK', { value: 'x'.repeat(64 * 1024 + 1) }, 'body.value'],
      ['/v1/secrets/OK', { value: 42 }, 'body.value'],
      ['/v1/secrets/OK', { value: 'x', extra: true }, 'body'],
    ];
    for (const [path, body, field] of cases) {
      const response = await h.client.raw('PUT', path, { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
      const error = ((await response.json()) as { error: { code: string; details: { issues: Array<{ path: string }> } } }).error;
      expect([path, response.status, error.code]).toEqual([path, 400, 'input.invalid']);
      expect(error.details.issues.map((i) => i.path).join(' ')).toContain(field);
    }
  });
});

describe('leasing with secrets', () => {
  it('a secret the policy does not allow is 403 policy.secret_denied naming it, and nothing is created', async () => {
    const containers = await containersOf(h.config.owner);
    const leases = (await h.client.listSandboxes()).length;
    const underDefault = await apiError(h.client.createSandbox({ secrets: [{ name: 'NPM_TOKEN' }] }));
    expect([underDefault.status, underDefault.code, underDefault.info.details?.name]).toEqual([403, 'policy.secret_denied', 'NPM_TOKEN']);
    await h.client.putSecret('NOT_ALLOWED', 'v');
    const notListed = await apiError(h.client.createSandbox({ policy: 'offline-ci', secrets: [{ name: 'NOT_ALLOWED' }] }));
    expect([notListed.status, notListed.code, notListed.info.details?.name]).toEqual([403, 'policy.secret_denied', 'NOT_ALLOWED']);
    expect(await containersOf(h.config.owner)).toEqual(containers);
    expect((await h.client.listSandboxes()).length).toBe(leases);
  });

  it('an allowed secret that is not stored is 404 secret.not_found, and nothing is created', async () => {
    const containers = await containersOf(h.config.owner);
    const err = await apiError(h.client.createSandbox({ policy: 'offline-ci', secrets: [{ name: 'CI_DEPLOY_KEY' }] }));
    expect([err.status, err.code, err.info.details?.name]).toEqual([404, 'secret.not_found', 'CI_DEPLOY_KEY']);
    expect(await containersOf(h.config.owner)).toEqual(containers);
  });

  it('malformed secret requests are 400 input.invalid (a file outside /run/secrets, a name twice, no variable name)', async () => {
    for (const secrets of [
      [{ name: 'NPM_TOKEN', file: '/workspace/.npmrc' }],
      [{ name: 'NPM_TOKEN' }, { name: 'NPM_TOKEN', env: 'X' }],
      [{ name: 'my.token' }],
    ]) {
      const err = await apiError(h.client.createSandbox({ policy: 'offline-ci', secrets }));
      expect([err.status, err.code]).toEqual([400, 'input.invalid']);
    }
  });

  it('the manifest lists the granted names only; the delivery was taken from Redis by the agent', async () => {
    const lease = await h.client.getSandbox(leaseId);
    expect(lease.manifest?.secretRefs).toEqual(['GITHUB_TOKEN', 'NPM_TOKEN']);
    expectNoValue(JSON.stringify(lease), 'the lease and its manifest');
    expect(await h.redis.exists(`${h.config.redisPrefix}lease:${leaseId}:secrets`)).toBe(0);
  });
});

describe('delivery to calls', () => {
  it('a call that asks gets the value in its env and in a file readable by the tool user only; the file is gone afterwards', async () => {
    const r = await exec({
      cmd: [
        `test "$(printf %s "$NPM_TOKEN" | sha256sum | cut -c1-64)" = ${sha(npmToken)}`,
        `test "$(printf %s "$GH_TOKEN" | sha256sum | cut -c1-64)" = ${sha(githubToken)}`,
        `test "$(sha256sum < /run/secrets/github | cut -c1-64)" = ${sha(githubToken)}`,
        'stat -c "%a %U %G" /run/secrets/github',
      ].join(' && '),
      secrets: ['NPM_TOKEN', 'GITHUB_TOKEN'],
    });
    expect([r.status, r.exitCode, r.stderr]).toEqual(['succeeded', 0, '']);
    expect(r.stdout).toBe('440 root sandbox\n');
    expect(r.receipt?.secretsUsed).toEqual(['GITHUB_TOKEN', 'NPM_TOKEN']);
    expect(r.receipt?.environment?.keys).toEqual(expect.arrayContaining(['GH_TOKEN', 'NPM_TOKEN']));
    const after = await exec({ cmd: 'ls -A /run/secrets | wc -l' });
    expect(after.stdout).toBe('0\n');
  });

  it('a call that does not ask sees neither the env var nor the file; one that asks for one secret gets only that one', async () => {
    const none = await exec({ cmd: 'test -z "${NPM_TOKEN+x}" && test -z "${GH_TOKEN+x}" && test ! -e /run/secrets/github && echo clean' });
    expect([none.status, none.stdout]).toEqual(['succeeded', 'clean\n']);
    expect(none.receipt?.secretsUsed).toEqual([]);
    const one = await exec({
      cmd: 'test -n "$NPM_TOKEN" && test -z "${GH_TOKEN+x}" && test ! -e /run/secrets/github && echo only-npm',
      secrets: ['NPM_TOKEN'],
    });
    expect([one.status, one.stdout]).toEqual(['succeeded', 'only-npm\n']);
    expect(one.receipt?.secretsUsed).toEqual(['NPM_TOKEN']);
  });

  it('asking for a secret the lease was not granted is 403 policy.secret_denied and runs nothing', async () => {
    const err = await apiError(h.client.submitCall(leaseId, 'exec', { argv: ['true'], secrets: ['CI_DEPLOY_KEY'] }));
    expect([err.status, err.code, err.info.details?.name]).toEqual([403, 'policy.secret_denied', 'CI_DEPLOY_KEY']);
  });
});

describe('redaction', () => {
  it('echo $NPM_TOKEN shows [REDACTED:NPM_TOKEN] in the events, the result and the model text; the receipt hashes the redacted bytes', async () => {
    const r = await exec({ cmd: 'echo "token=$NPM_TOKEN."; echo "$NPM_TOKEN" >&2', secrets: ['NPM_TOKEN'] });
    expect(r.stdout).toBe(`token=${NPM}.\n`);
    expect(r.stderr).toBe(`${NPM}\n`);
    expect(r.modelText).toContain(NPM);
    const events = await eventsOf(r.callId);
    expect(reassemble(events, 'stdout').toString()).toBe(r.stdout);
    expect(reassemble(events, 'stderr').toString()).toBe(r.stderr);
    expect(r.receipt?.outputs?.stdout).toMatchObject({ bytes: Buffer.byteLength(r.stdout), sha256: sha(r.stdout) });
    expectNoValue(JSON.stringify([r, events]), 'the result and events');
  });

  it('a value written in two parts with a pause between (two reads of the pipe) is still one marker', async () => {
    const r = await exec({
      cmd: 'printf %s "${NPM_TOKEN:0:9}"; sleep 0.5; printf %s "${NPM_TOKEN:9}"; echo " end"',
      secrets: ['NPM_TOKEN'],
    });
    expect(r.stdout).toBe(`${NPM} end\n`);
    const events = await eventsOf(r.callId);
    expect(reassemble(events, 'stdout').toString()).toBe(`${NPM} end\n`);
    expectNoValue(JSON.stringify(events), 'the events');
    expect(JSON.stringify(events)).not.toContain(Buffer.from(npmToken.slice(0, 9)).toString('base64'));
  });

  it('the value in output past the kept limit is redacted in the artifact too', async () => {
    // offline-ci keeps 8 MiB per stream; the value comes after 9 MB, so only the artifact holds it.
    const r = await exec({ cmd: 'head -c 9000000 /dev/zero | tr "\\0" x; echo; echo "tail $NPM_TOKEN"', secrets: ['NPM_TOKEN'] });
    const artifactId = r.truncation?.stdout?.fullArtifact;
    expect(artifactId).toBeTruthy();
    const response = await h.client.raw('GET', `/v1/sandboxes/${leaseId}/artifacts/${artifactId}`);
    const bytes = Buffer.from(await response.arrayBuffer());
    const tail = `x\ntail ${NPM}\n`;
    expect(bytes.subarray(-tail.length).toString()).toBe(tail);
    expect(bytes.includes(npmToken)).toBe(false);
    expect(r.receipt?.outputs?.stdout.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(r.modelText).toContain(`tail ${NPM}`);
  });

  it('a call that did not ask still has any value redacted (read from a file an earlier call wrote), also by read_file', async () => {
    const write = await exec({ cmd: 'printf "%s\\n" "$NPM_TOKEN" > /workspace/leak.txt', secrets: ['NPM_TOKEN'] });
    expect(write.status).toBe('succeeded');
    const cat = await exec({ argv: ['cat', '/workspace/leak.txt'] });
    expect(cat.stdout).toBe(`${NPM}\n`);
    const read = (await h.client.submitCall(leaseId, 'read_file', { path: '/workspace/leak.txt' }, { waitSeconds: 60 })) as ToolResult;
    expect(read.data?.content).toBe(`${NPM}\n`);
    const b64 = (await h.client.submitCall(
      leaseId,
      'read_file',
      { path: '/workspace/leak.txt', encoding: 'base64' },
      { waitSeconds: 60 },
    )) as ToolResult;
    expect(Buffer.from(String(b64.data?.content), 'base64').toString()).toBe(`${NPM}\n`);
    expectNoValue(JSON.stringify([cat, read, b64]), 'results');
    await exec({ argv: ['rm', '/workspace/leak.txt'] });
  });
});

describe('the CLI', () => {
  it('`sbx secret put` reads the value from stdin; `sbx run --secret` hands it to the command and its output shows the marker', async () => {
    const value = `cli_${randomBytes(12).toString('hex')}`;
    const put = await sbx(['secret', 'put', 'GITHUB_TOKEN'], `${value}\n`);
    expect([put.code, put.stdout]).toEqual([0, `GITHUB_TOKEN version 2 (${value.length} bytes)\n`]);
    const run = await sbx(['run', '--policy', 'offline-ci', '--secret', 'GITHUB_TOKEN=GH', '--', 'echo "gh=$GH"']);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe('gh=[REDACTED:GITHUB_TOKEN]\n');
    expect(run.stderr).not.toContain(value);
    const ls = await sbx(['--json', 'secret', 'ls']);
    expect((JSON.parse(ls.stdout) as Array<{ name: string; version: number }>).find((s) => s.name === 'GITHUB_TOKEN')?.version).toBe(2);
  });
});

describe('where values never go', () => {
  it('docker inspect (env, labels, command, mounts), the container log, receipts, call views and all of Redis hold no value', async () => {
    const [inspect] = JSON.parse(await docker('inspect', `sbx-${leaseId}`)) as Array<{ HostConfig: { Tmpfs: Record<string, string> } }>;
    expectNoValue(JSON.stringify(inspect), 'docker inspect');
    expect(inspect!.HostConfig.Tmpfs['/run/secrets']).toMatch(/noexec.*uid=0,gid=1000,mode=2750/);
    expectNoValue(await docker('logs', `sbx-${leaseId}`), 'the container log');
    const r = await exec({ cmd: 'echo "$NPM_TOKEN $GH_TOKEN"; cat /run/secrets/github', secrets: ['NPM_TOKEN', 'GITHUB_TOKEN'] });
    expect(r.stdout).toBe(`${NPM} [REDACTED:GITHUB_TOKEN]\n[REDACTED:GITHUB_TOKEN]`);
    const receipt = await h.client.raw('GET', `/v1/receipts/${r.receipt!.receiptId}`);
    expectNoValue(await receipt.text(), 'the receipt');
    expectNoValue(JSON.stringify(await h.client.getCall(leaseId, r.callId)), 'the call view');
    expectNoValue(await redisDump(), 'Redis');
  });
});
