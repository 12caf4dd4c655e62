/**
 * Crash recovery against the real Docker engine and Redis. A control plane runs as its own
 * process (`main.js`, own owner, prefix, port and key) and is killed with SIGKILL at a chosen
 * moment — in the middle of a lease create, of a running call, of a release — found by polling
 * the ledger and Docker; then a harness with the same owner and prefix starts, as a restarted
 * control plane would, and the outcome is checked. Also: the agent inside a sandbox killed, and
 * a private Redis (AOF, ACL file) killed and restarted under load.
 *
 * After each: no container, volume or network of the owner left over, no receipt lost, every
 * call with exactly one terminal status. Each test prints one `[crash]` line with what it saw
 * (states and timings).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createHash, randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SbxClient } from '../sdk/index.js';
import type { CallView, ToolResult } from '../contract/objects.js';
import { loadConfig } from '../control-plane/config.js';
import { leaseKeys } from '../contract/queue.js';
import { CallStore } from '../control-plane/calls/store.js';
import { LeaseStore } from '../control-plane/leases/store.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import {
  planeIdentity,
  startChildPlane,
  type ChildPlane,
  docker,
  eventually,
  REAL_AGENT_IN_SANDBOX,
  REPO_ROOT,
  runtimeWithAgent,
  startHarness,
  type Harness,
} from './fixtures/index.js';

/** Containers, volumes and networks labelled with `owner`. */
async function leftoversOf(owner: string): Promise<string[]> {
  const filter = `label=sbx.owner=${owner}`;
  const lists = await Promise.all([
    docker('ps', '-a', '--filter', filter, '--format', 'container {{.Names}}'),
    docker('volume', 'ls', '--filter', filter, '--format', 'volume {{.Name}}'),
    docker('network', 'ls', '--filter', filter, '--format', 'network {{.Name}}'),
  ]);
  return lists.join('\n').split('\n').filter(Boolean);
}

async function agentUsers(redis: Redis, leaseId: string): Promise<string[]> {
  return ((await redis.call('ACL', 'USERS')) as string[]).filter((u) => u.endsWith(`agent:${leaseId}`));
}

/** The call's event types in order, checking `seq` is gap-free from 1. */
async function eventTypes(client: SbxClient, leaseId: string, callId: string): Promise<string[]> {
  const events = [];
  for await (const e of client.events(leaseId, callId)) events.push(e);
  expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  return events.map((e) => e.type);
}

/** A finished call has one terminal status: one `call.finished`, last; a receipt event exactly when the result has a receipt. */
async function expectOneTerminal(client: SbxClient, call: CallView): Promise<void> {
  expect(call.status).toBe('finished');
  const types = await eventTypes(client, call.leaseId, call.callId);
  expect(types.filter((t) => t === 'call.finished')).toHaveLength(1);
  expect(types.at(-1)).toBe('call.finished');
  expect(types.filter((t) => t === 'receipt')).toHaveLength(call.result?.receipt ? 1 : 0);
}

const since = (t0: number): number => Date.now() - t0;

/** The lease and call records of a control plane's prefix, read as its own stores read them. */
function ledgerOf(redis: Redis, prefix: string) {
  const leases = new LeaseStore(redis, prefix);
  const calls = new CallStore(redis, prefix);
  return {
    listLeases: () => leases.listLeases(),
    getLease: (id: string) => leases.getLease(id),
    getCall: (leaseId: string, callId: string) => calls.getCall(leaseId, callId),
  };
}
type Ledger = ReturnType<typeof ledgerOf>;

/**
 * Runs `body` against a `main.js` control plane of its own (owner, prefix, key); `restart()`
 * starts a harness with the same identity, as the next control plane after a crash would.
 * Both are stopped afterwards, whatever happened.
 */
async function withChildPlane(
  name: string,
  env: Record<string, string>,
  body: (ctx: { id: ReturnType<typeof planeIdentity>; child: ChildPlane; ledger: Ledger; restart(): Promise<Harness> }) => Promise<void>,
): Promise<void> {
  const id = planeIdentity(name);
  const child = await startChildPlane(id, env);
  let h: Harness | undefined;
  try {
    await body({
      id,
      child,
      ledger: ledgerOf(shared, id.prefix),
      restart: async () => (h = await startHarness({ SBX_OWNER: id.owner, SBX_REDIS_PREFIX: id.prefix, SBX_SECRETS_KEY: id.secretsKey })),
    });
  } finally {
    await child.kill9();
    await h?.close();
  }
}

let shared: Redis;
beforeAll(() => {
  shared = connectRedis(redisOptions(loadConfig(process.env, REPO_ROOT).redis));
});
afterAll(() => shared?.disconnect());

/** The last 30 lines a container wrote, stdout and stderr, or what failed to read them. */
function dockerLogs(container: string): Promise<string> {
  return new Promise((resolve) => {
    execFile('docker', ['logs', '--tail', '30', container], { maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve(err ? String(err) : `${stdout}${stderr}`),
    );
  });
}

describe('kill -9 of the control plane', () => {
  it(
    'in the middle of a lease create (container up, agent not ready): the next control plane fails the lease (create_interrupted) and removes the container',
    { timeout: 120_000 },
    async () => {
      // An agent that takes 3 s to start holds the lease in `starting` long enough to kill in
      // (the agent comes from the runtime mount: a runtime whose agent waits, then runs the real one).
      const slow = await runtimeWithAgent(`setTimeout(() => require(${JSON.stringify(REAL_AGENT_IN_SANDBOX)}), 3000);\n`);
      try {
        await withChildPlane('crash-create', { SBX_AGENT_RUNTIME: slow.dir }, async ({ id, child, ledger, restart }) => {
          const t0 = Date.now();
          const request = child.client.createSandbox().catch((e: unknown) => e);
          const seen = new Set<string>();
          const starting = await eventually(
            async () => {
              const [lease] = await ledger.listLeases();
              if (lease) seen.add(lease.status);
              // The sandbox's own container (a create also makes short-lived helper containers of the image).
              return lease?.status === 'starting' && (await leftoversOf(id.owner)).includes(`container sbx-${lease.id}`) ? lease : null;
            },
            (l) => l !== null,
            30_000,
            20,
          );
          const killedAt = since(t0);
          await child.kill9();
          expect(await request).toBeInstanceOf(Error);
          const tKill = Date.now();
          expect(await leftoversOf(id.owner)).toContain(`container sbx-${starting!.id}`);

          const h = await restart();
          const failed = await eventually(
            () => h.client.getSandbox(starting!.id),
            (l) => l.status === 'failed',
            30_000,
          );
          const failedAfter = since(tKill);
          expect(failed.endReason).toBe('create_interrupted');
          const events = (await h.client.leaseEvents(failed.id)).map((e) => `${e.from ?? '-'}>${e.to}:${e.reason}`);
          expect(events).toEqual(['->pending:created', 'pending>starting:starting', 'starting>failed:create_interrupted']);
          await eventually(
            () => leftoversOf(id.owner),
            (l) => l.length === 0,
            15_000,
          );
          // Teardown removes the container first, the agent's Redis user a moment later, and the
          // audit entry comes after the last step.
          await eventually(
            () => agentUsers(shared, failed.id),
            (users) => users.length === 0,
            10_000,
          );
          const reaped = await eventually(
            async () =>
              (
                (await (await h.client.raw('GET', `/v1/audit?action=lease.reap&target=lease:${failed.id}`)).json()) as {
                  entries: unknown[];
                }
              ).entries,
            (entries) => entries.length > 0,
            10_000,
          );
          // Two more complete reconcile rounds (run here and awaited) add no second entry.
          await h.plane.leases.reconcile();
          await h.plane.leases.reconcile();
          expect(await (await h.client.raw('GET', `/v1/audit?action=lease.reap&target=lease:${failed.id}`)).json()).toEqual({
            entries: reaped,
            nextCursor: null,
          });
          expect(reaped).toHaveLength(1);
          console.info(
            '[crash] create:',
            JSON.stringify({ statesSeen: [...seen], killedAtMs: killedAt, failedMsAfterKill: failedAfter, events }),
          );
        });
      } finally {
        await slow.remove();
      }
    },
  );

  it(
    'in the middle of a running call: the call runs on, and its result and receipt reach the ledger through the next control plane',
    { timeout: 120_000 },
    async () => {
      await withChildPlane('crash-call', {}, async ({ id, child, ledger, restart }) => {
        const lease = await child.client.createSandbox();
        const { callId } = await child.client.submitCall(lease.id, 'exec', { cmd: 'echo started; sleep 3; echo finished' });
        await eventually(
          () => ledger.getCall(lease.id, callId),
          (c) => c?.status === 'running',
          20_000,
          20,
        );
        await child.kill9();
        const tKill = Date.now();

        const h = await restart();
        const call = await eventually(
          () => h.client.getCall(lease.id, callId),
          (c) => c.status === 'finished',
          40_000,
        );
        const finishedAfter = since(tKill);
        expect(call.result?.status).toBe('succeeded');
        expect(call.result?.stdout).toBe('started\nfinished\n');
        expect(call.result?.receipt?.commitState).toBe('committed');
        await expectOneTerminal(h.client, call);
        expect((await h.client.raw('GET', `/v1/receipts/${call.result!.receipt!.receiptId}`)).status).toBe(200);
        // The lease was adopted, not lost.
        expect((await h.client.getSandbox(lease.id)).status).toBe('ready');
        const after = (await h.client.submitCall(lease.id, 'exec', { argv: ['echo', 'again'] }, { waitSeconds: 30 })) as ToolResult;
        expect(after.stdout).toBe('again\n');
        expect((await h.client.releaseSandbox(lease.id)).status).toBe('released');
        expect(await leftoversOf(id.owner)).toEqual([]);
        console.info(
          '[crash] running call:',
          JSON.stringify({ callStatusAtKill: 'running', resultMsAfterKill: finishedAfter, result: call.result?.status }),
        );
      });
    },
  );

  it(
    'in the middle of a release (waiting out its grace): the next control plane takes the release over and finishes it once',
    { timeout: 120_000 },
    async () => {
      await withChildPlane('crash-release', {}, async ({ id, child, ledger, restart }) => {
        const lease = await child.client.createSandbox();
        const { callId } = await child.client.submitCall(lease.id, 'exec', { cmd: 'sleep 60' });
        await eventually(
          () => ledger.getCall(lease.id, callId),
          (c) => c?.status === 'running',
          20_000,
          20,
        );
        const request = child.client.releaseSandbox(lease.id, { graceMs: 5000 }).catch((e: unknown) => e);
        const releasing = await eventually(
          () => ledger.getLease(lease.id),
          (l) => l?.status === 'releasing',
          20_000,
          20,
        );
        await child.kill9();
        expect(await request).toBeInstanceOf(Error);
        const tKill = Date.now();

        const h = await restart();
        const released = await eventually(
          () => h.client.getSandbox(lease.id),
          (l) => l.status === 'released',
          40_000,
        );
        const releasedAfter = since(tKill);
        const events = (await h.client.leaseEvents(lease.id)).map((e) => `${e.from ?? '-'}>${e.to}:${e.reason}`);
        expect(events.slice(-3)).toEqual([
          'ready>releasing:released',
          'releasing>releasing:release_resumed',
          'releasing>released:released',
        ]);
        // The agent was still there: the call was cancelled through it, with its receipt.
        const call = await h.client.getCall(lease.id, callId);
        expect(call.result).toMatchObject({ status: 'cancelled', receipt: { commitState: 'unknown', exit: { killedBy: 'cancel' } } });
        await expectOneTerminal(h.client, call);
        const audit = (await (await h.client.raw('GET', `/v1/audit?action=lease.release&target=lease:${lease.id}`)).json()) as {
          entries: Array<{ actor: unknown }>;
        };
        expect(audit.entries).toHaveLength(1);
        // Recorded as done by the key that asked for it, not by the process that finished it.
        expect(audit.entries[0]!.actor).toMatchObject({ role: 'admin' });
        expect(await leftoversOf(id.owner)).toEqual([]);
        expect(await agentUsers(shared, lease.id)).toEqual([]);
        expect(released.endedAt).not.toBeNull();
        console.info(
          '[crash] release:',
          JSON.stringify({ statusAtKill: releasing!.status, releasedMsAfterKill: releasedAfter, call: call.result?.status, events }),
        );
      });
    },
  );

  it(
    'right after creating a lease: its durable timer still expires it on time, through another process',
    { timeout: 120_000 },
    async () => {
      await withChildPlane('crash-expiry', {}, async ({ id, child, restart }) => {
        const lease = await child.client.createSandbox({ ttlSeconds: 6 });
        await child.kill9();
        const h = await restart();
        const expired = await eventually(
          () => h.client.getSandbox(lease.id),
          (l) => l.status === 'expired',
          30_000,
        );
        const lateMs = Date.parse(expired.endedAt!) - Date.parse(lease.expiresAt);
        expect(lateMs).toBeGreaterThanOrEqual(0);
        expect(lateMs).toBeLessThan(3000);
        expect(await leftoversOf(id.owner)).toEqual([]);
        console.info('[crash] expiry after creator died:', JSON.stringify({ endedMsAfterExpiresAt: lateMs }));
      });
    },
  );
});

describe('the agent inside a sandbox killed', () => {
  it(
    'the lease ends lost (container_exited) and its running call effect_unknown with a receipt; nothing is left',
    { timeout: 60_000 },
    async () => {
      const h = await startHarness();
      try {
        const lease = await h.client.createSandbox();
        const { callId } = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 60' });
        for await (const e of h.client.events(lease.id, callId)) if (e.type === 'call.started') break;
        // The agent is tini's child (tini is the container's PID 1); kill it from the host.
        const tini = (await docker('inspect', '--format', '{{.State.Pid}}', `sbx-${lease.id}`)).trim();
        const agent = (
          await new Promise<string>((resolve, reject) => {
            const ps = spawn('pgrep', ['-P', tini]);
            let out = '';
            ps.stdout.on('data', (d: Buffer) => (out += d.toString()));
            ps.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`pgrep exited ${code}`))));
          })
        )
          .trim()
          .split('\n')[0]!;
        const tKill = Date.now();
        process.kill(Number(agent), 'SIGKILL');
        const lost = await eventually(
          () => h.client.getSandbox(lease.id),
          (l) => l.status === 'lost',
          20_000,
        );
        const lostAfter = since(tKill);
        expect(lost.endReason).toBe('container_exited');
        const call = await h.client.getCall(lease.id, callId);
        expect(call.result).toMatchObject({
          status: 'effect_unknown',
          error: { code: 'execution.sandbox_lost' },
          receipt: { commitState: 'unknown' },
        });
        await expectOneTerminal(h.client, call);
        expect(await leftoversOf(h.config.owner)).toEqual([]);
        const audit = (await (await h.client.raw('GET', `/v1/audit?action=lease.lost&target=lease:${lease.id}`)).json()) as {
          entries: unknown[];
        };
        expect(audit.entries).toHaveLength(1);
        console.info(
          '[crash] agent killed:',
          JSON.stringify({ lostMsAfterKill: lostAfter, endReason: lost.endReason, call: call.result?.status }),
        );
      } finally {
        await h.close();
      }
    },
  );
});

describe('Redis killed and restarted under load (AOF, ACL file)', () => {
  let dir: string;
  let redis: ChildProcess | null = null;
  let conf: string;
  const password = randomBytes(16).toString('hex');

  /** Starts the private redis-server on `conf` and waits until it answers. */
  async function startRedis(): Promise<void> {
    const proc = spawn('redis-server', [conf], { stdio: 'ignore' });
    redis = proc;
    const probe = connectRedis({ path: join(dir, 'sock', 'redis.sock'), password, maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    probe.on('error', () => undefined);
    try {
      await eventually(
        () => probe.ping().catch(() => 'down'),
        (r) => r === 'PONG',
        10_000,
      );
    } finally {
      probe.disconnect();
    }
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-redis-'));
    // The socket's directory is bind-mounted into sandboxes: nothing else goes in it.
    await Promise.all(['sock', 'data'].map((d) => mkdir(join(dir, d), { mode: 0o700 })));
    await writeFile(
      join(dir, 'data', 'users.acl'),
      `user default on #${createHash('sha256').update(password).digest('hex')} ~* &* +@all\n`,
      { mode: 0o600 },
    );
    conf = join(dir, 'redis.conf');
    // As deploy/local/setup.sh configures it, with every write fsynced so a SIGKILL loses nothing acknowledged.
    await writeFile(
      conf,
      [
        `port 0`,
        `unixsocket ${join(dir, 'sock', 'redis.sock')}`,
        'unixsocketperm 700',
        `dir ${join(dir, 'data')}`,
        'appendonly yes',
        'appendfsync always',
        'maxmemory-policy noeviction',
        `aclfile ${join(dir, 'data', 'users.acl')}`,
      ].join('\n') + '\n',
    );
    await startRedis();
  });
  afterAll(async () => {
    if (redis && redis.exitCode === null) redis.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  it(
    'calls in flight and calls submitted during the outage each end with exactly one terminal status; a long call survives with its receipt',
    { timeout: 180_000 },
    async () => {
      const socket = join(dir, 'sock', 'redis.sock');
      const h = await startHarness({ SBX_REDIS_URL: `unix://${socket}`, SBX_AGENT_REDIS_SOCKET: socket, SBX_REDIS_PASSWORD: password });
      try {
        const leases = await Promise.all([h.client.createSandbox(), h.client.createSandbox()]);
        const long = await h.client.submitCall(leases[0]!.id, 'exec', { cmd: 'sleep 4; echo survived' });
        for await (const e of h.client.events(leases[0]!.id, long.callId)) if (e.type === 'call.started') break;

        const submitted: Array<{ leaseId: string; callId: string; error: unknown; answered: boolean }> = [];
        let loading = true;
        const load = leases.map(async (lease, i) => {
          for (let n = 0; loading; n += 1) {
            const entry = { leaseId: lease.id, callId: `load-${i}-${n}`, error: null as unknown, answered: false };
            submitted.push(entry);
            await h.client.submitCall(lease.id, 'exec', { argv: ['echo', entry.callId] }, { callId: entry.callId, waitSeconds: 30 }).then(
              () => (entry.answered = true),
              (err: unknown) => (entry.error = err),
            );
          }
        });
        // Load first: calls answered on both sandboxes before the kill.
        await eventually(
          () => submitted.filter((e) => e.answered).length,
          (n) => n >= 8,
          30_000,
        );
        const beforeKill = submitted.length;
        redis!.kill('SIGKILL');
        await new Promise((r) => redis!.once('exit', r));
        // The outage is on once a client has seen it (the harness's own connection drops).
        await eventually(
          () => h.redis.status,
          (status) => status !== 'ready',
          10_000,
          20,
        );
        const tRestart = Date.now();
        await startRedis();
        const restartedMs = since(tRestart);
        // Load after: calls submitted after the restart answered, more than were made before the kill.
        const resumedFrom = submitted.length;
        await eventually(
          () => submitted.slice(resumedFrom).filter((e) => e.answered).length,
          (n) => n >= Math.max(4, beforeKill),
          60_000,
        );
        loading = false;
        await Promise.all(load);

        const longCall = await eventually(
          () => h.client.getCall(leases[0]!.id, long.callId),
          (c) => c.status === 'finished',
          60_000,
        );
        expect(longCall.result).toMatchObject({ status: 'succeeded', stdout: 'survived\n', receipt: { commitState: 'committed' } });
        await expectOneTerminal(h.client, longCall);
        const outcomes: Record<string, number> = {};
        for (const entry of submitted) {
          const call = await h.client.getCall(entry.leaseId, entry.callId).catch(() => null);
          if (call === null) {
            // Never recorded: then its submission must have failed, visibly.
            expect(entry.error).not.toBeNull();
            outcomes.not_recorded = (outcomes.not_recorded ?? 0) + 1;
            continue;
          }
          const finished = await eventually(
            () => h.client.getCall(entry.leaseId, entry.callId),
            (c) => c.status === 'finished',
            30_000,
          ).catch(async (err: unknown) => {
            // What a stuck call looked like: its events, its inbox entries and markers (contract/queue.ts),
            // how its submission ended, and the agent's last words (the agent logs on stderr).
            const keys = leaseKeys(h.config.redisPrefix, entry.leaseId);
            const [events, inbox, queued, attempt, agentLog] = await Promise.all([
              h.redis.lrange(`${h.config.redisPrefix}events:${entry.leaseId}:${entry.callId}`, 0, -1),
              h.redis.xrange(keys.inbox, '-', '+').then((all) => all.filter(([, fields]) => fields.join(' ').includes(entry.callId))),
              h.redis.get(keys.queued(entry.callId)),
              h.redis.get(keys.attempt(entry.callId)),
              dockerLogs(`sbx-${entry.leaseId}`),
            ]);
            const submission = entry.answered ? 'answered' : String(entry.error);
            console.info(
              '[crash] stuck call:',
              JSON.stringify({ callId: entry.callId, submission, events, inbox, queued, attempt, agentLog }),
            );
            throw err;
          });
          await expectOneTerminal(h.client, finished);
          if (finished.result!.status === 'succeeded') {
            expect(finished.result!.stdout).toBe(`${entry.callId}\n`);
            expect(finished.result!.receipt).not.toBeNull();
          }
          outcomes[finished.result!.status] = (outcomes[finished.result!.status] ?? 0) + 1;
        }
        expect(outcomes.succeeded ?? 0).toBeGreaterThan(beforeKill);
        // The agents logged in again (their ACL users came back from the ACL file) and still work.
        for (const lease of leases) {
          const r = (await h.client.submitCall(lease.id, 'exec', { argv: ['echo', 'after restart'] }, { waitSeconds: 30 })) as ToolResult;
          expect(r.stdout).toBe('after restart\n');
          expect((await h.client.releaseSandbox(lease.id)).status).toBe('released');
        }
        expect(await leftoversOf(h.config.owner)).toEqual([]);
        console.info(
          '[crash] redis restart:',
          JSON.stringify({
            calls: submitted.length,
            beforeKill,
            redisBackMs: restartedMs,
            outcomes,
            failedSubmits: submitted.filter((s) => s.error !== null).length,
          }),
        );
      } finally {
        await h.close();
      }
    },
  );
});
