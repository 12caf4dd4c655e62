/**
 * The lease service with fakes of its ports (an in-memory lease store with compare-and-swap, a
 * runtime that starts nothing, an agent link that says hello at once): the lifecycle's use
 * cases and the order of their effects, without Docker or Redis.
 */
import { CredentialInjection } from '../egress/credentials.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { LeaseEvent, SandboxFacts } from '../../contract/objects.js';
import type { Principal } from '../http/auth.js';
import { Policy, policyRef } from '../policies/schema.js';
import type { OwnedSandbox } from '../runtime/runtime.js';
import { LeaseService, type LeaseServiceDeps } from './service.js';
import type { LeaseRecord } from './store.js';

const policy = Policy.parse(parseYaml(readFileSync(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));
const facts = {
  os: { id: 'debian', name: 'Debian', version: '12' },
  arch: 'x64',
  kernel: '6',
  toolchain: { node: '22', git: '2', python: '3.11' },
  user: { name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox' },
  workdir: '/workspace',
  agentVersion: '0',
} as unknown as SandboxFacts;
const alice: Principal = { keyId: 'k_alice', role: 'user', tenant: 'alice' };
const bob: Principal = { keyId: 'k_bob', role: 'user', tenant: 'bob' };

let dataDir: string;
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'sbx-lease-unit-'));
});
afterAll(async () => rm(dataDir, { recursive: true, force: true }));

/** Every port faked; `log` lists the effects in order. */
function world(over: { start?: () => Promise<{ containerId: string; seededPaths: string[] }>; pools?: LeaseServiceDeps['pools'] } = {}) {
  const log: string[] = [];
  const records = new Map<string, string>();
  const events = new Map<string, LeaseEvent[]>();
  const containers = new Map<string, OwnedSandbox>();
  const audit: Array<{ action: string; actor: unknown }> = [];
  const processId = 'proc-unit';
  const store: LeaseServiceDeps['store'] = {
    createLease: async (lease, reason, at) => {
      if (records.has(lease.id)) return false;
      records.set(lease.id, JSON.stringify(lease));
      events.set(lease.id, [{ seq: 1, from: null, to: lease.status, reason, details: {}, at: at.toISOString() }]);
      return true;
    },
    transitionLease: async (id, decide, at) => {
      const text = records.get(id);
      if (text === undefined) return { applied: false, lease: null };
      const current = JSON.parse(text) as LeaseRecord;
      const next = decide(current);
      if (!next) return { applied: false, lease: current };
      records.set(id, JSON.stringify(next.record));
      const list = events.get(id)!;
      list.push({
        seq: list.length + 1,
        from: current.status,
        to: next.record.status,
        reason: next.reason,
        details: next.details ?? {},
        at: at().toISOString(),
      });
      log.push(`lease ${current.status}→${next.record.status}`);
      return { applied: true, lease: next.record };
    },
    getLease: async (id) => (records.has(id) ? (JSON.parse(records.get(id)!) as LeaseRecord) : null),
    listLeases: async () => [...records.values()].map((t) => JSON.parse(t) as LeaseRecord),
    leaseEvents: async (id) => events.get(id) ?? [],
    claimIdempotencyKey: async () => null,
    releaseIdempotencyKey: async () => undefined,
    claimOnce: async () => true,
  };
  const deps: LeaseServiceDeps = {
    runtime: {
      info: async () => ({ engineVersion: '27', ociRuntimes: ['runc'] }),
      inspectImage: async () => ({
        id: 'sha256:img',
        env: {},
        workingDir: null,
        user: null,
        labels: {},
        entrypoint: null,
        cmd: null,
        repoDigests: [],
      }),
      readImageFiles: async (_ref: string, paths: string[]) => paths.map(() => null),
      start:
        over.start ??
        (async (spec) => {
          const leaseId = spec.labels['sbx.lease']!;
          containers.set(leaseId, { leaseId, containerId: `ctr_${leaseId}`, running: true, paused: false, node: 'local' });
          log.push('runtime.start');
          return { containerId: `ctr_${leaseId}`, seededPaths: [] };
        }),
      exited: (_id, signal) => new Promise((resolve) => signal?.addEventListener('abort', () => resolve({ exitCode: null, logTail: '' }))),
      remove: async (id) => {
        containers.delete(id);
        log.push('runtime.remove');
      },
      listOwned: async () => [...containers.values()],
      pause: async () => undefined,
      unpause: async () => undefined,
      checkpointSupport: async () => ({ supported: false, missing: ['fake runtime'] }),
      checkpoint: async () => undefined,
    },
    store,
    link: {
      liveness: { processId, isAlive: async (p) => p === processId },
      acl: { provision: async () => ({ username: 'u', password: 'p' }), leases: async () => [] },
      handshake: {
        awaitHello: async (leaseId) => ({ leaseId, facts, startedAt: new Date().toISOString() }),
        bind: async () => ({ ok: true }),
        leaveSecretDelivery: async () => undefined,
        knownImageFacts: async () => null,
        keepImageFacts: async () => undefined,
      },
      returns: { start: async () => (log.push('returns.start'), true), drain: async () => undefined, active: () => [] },
      calls: { attemptOf: async () => null, markWithdrawnSecrets: async () => undefined },
      stop: async () => undefined,
      destroy: async () => void log.push('link.destroy'),
    },
    expiry: {
      set: async () => void log.push('expiry.set'),
      ensure: async () => void log.push('expiry.ensure'),
      clear: async () => void log.push('expiry.clear'),
    },
    retain: async () => void log.push('retain'),
    policies: { resolve: async () => ({ policy, ref: policyRef(policy) }) },
    audit: { record: async (e) => (audit.push({ action: e.action, actor: e.actor }), { ...e, id: 'a', at: '', details: {} }) },
    calls: {
      openCalls: async () => [],
      waitAllFinished: async () => undefined,
      cancel: async () => undefined,
      denyWithdrawnSecrets: async () => [],
      waitingForApproval: async () => [],
      abandonOpenCalls: async () => void log.push('calls.abandon'),
    },
    egress: { serve: async () => undefined, stop: async () => undefined, update: () => true, basisOf: () => null },
    secrets: { reveal: async () => new Map() },
    credentials: new CredentialInjection({ secretsKey: Buffer.alloc(32), secrets: { reveal: async () => new Map() } }),
    quotas: { reserve: async () => void log.push('quota.reserve'), release: async () => void log.push('quota.release') },
    metrics: { leaseCreated: () => undefined, setPoolSize: () => undefined },
    ...(over.pools ? { pools: over.pools } : {}),
    now: () => new Date(),
    log: pino({ level: 'silent' }),
  };
  const service = new LeaseService(deps, {
    ownership: { owner: 'unit', installation: 'inst_unit' },
    sbxVersion: '0',
    dataDir,
    defaultImage: 'img',
    agentRuntimeDir: '/opt/sbx-runtime',
    agentRedisSocket: '/run/redis/redis.sock',
    redisPrefix: 'u:',
    retentionSeconds: 60,
    mountAllowlist: [],
    protectedHostPaths: [],
  });
  return { service, log, audit, containers, store, events };
}

describe('LeaseService.create', () => {
  it('quota first, then the record, the timer, the container and the agent; ready with a manifest', async () => {
    const { service, log, audit, events } = world();
    const { lease, replayed } = await service.create({}, alice);
    expect([lease.status, lease.tenant, replayed, lease.manifest?.digest.startsWith('sha256:')]).toEqual(['ready', 'alice', false, true]);
    expect(log).toEqual([
      'quota.reserve',
      'expiry.set',
      'lease pending→starting',
      'returns.start',
      'runtime.start',
      'lease starting→ready',
    ]);
    expect(events.get(lease.id)!.map((e) => e.reason)).toEqual(['created', 'starting', 'ready']);
    expect(audit).toEqual([{ action: 'lease.create', actor: alice }]);
  });

  it('a container that fails to start: everything torn down, the lease failed, the quota share back', async () => {
    const { service, log, store } = world({
      start: async () => {
        throw new Error('no engine');
      },
    });
    await expect(service.create({}, alice)).rejects.toMatchObject({ code: 'lease.create_failed' });
    const [lease] = await store.listLeases();
    expect([lease!.status, lease!.endReason]).toEqual(['failed', 'create_failed']);
    expect(log.slice(-7)).toEqual([
      'runtime.remove',
      'calls.abandon',
      'link.destroy',
      'lease starting→failed',
      'retain',
      'expiry.clear',
      'quota.release',
    ]);
  });

  it('a claimed pooled sandbox whose claim cannot be settled (twice) is torn down and its lease failed, quota back; the create starts cold', async () => {
    let settles = 0;
    const { service, log, store } = world({
      pools: {
        claim: async () => ({ id: 'sbx_warmunit', containerId: 'ctr_sbx_warmunit', facts }),
        owns: async () => false,
        settle: async () => {
          settles += 1;
          if (settles <= 2) throw new Error('Redis refused HDEL'); // both the claim's settle and the one after its failure
        },
      },
    });
    const { lease } = await service.create({}, alice);
    expect(lease.status).toBe('ready');
    expect(lease.id).not.toBe('sbx_warmunit');
    const warm = await store.getLease('sbx_warmunit');
    expect([warm!.status, warm!.endReason]).toEqual(['failed', 'create_failed']);
    expect(log.filter((l) => l === 'quota.reserve' || l === 'quota.release')).toEqual(['quota.reserve', 'quota.release', 'quota.reserve']);
    expect(log).toContain('runtime.remove');
  });

  it('a TTL above the policy’s maximum is refused before anything is made', async () => {
    const { service, log } = world();
    await expect(service.create({ ttlSeconds: policy.resources.maxTtlSeconds + 1 }, alice)).rejects.toMatchObject({
      code: 'lease.ttl_exceeds_policy',
    });
    expect(log).toEqual([]);
  });
});

describe('LeaseService: reading, renewing, releasing', () => {
  it('another tenant’s lease is lease.not_found, for every use case', async () => {
    const { service } = world();
    const { lease } = await service.create({}, alice);
    for (const attempt of [
      () => service.get(lease.id, bob),
      () => service.events(lease.id, bob),
      () => service.active(lease.id, bob),
      () => service.renew(lease.id, bob, 60),
      () => service.release(lease.id, bob),
    ]) {
      await expect(attempt()).rejects.toMatchObject({ code: 'lease.not_found' });
    }
    expect(await service.list(bob)).toEqual([]);
    expect(await service.canSee(lease.id, bob)).toBe(false);
  });

  it('renew moves the expiry and its timer; past the policy’s bound it is lease.ttl_exceeds_policy and nothing moves', async () => {
    const { service, log } = world();
    const { lease } = await service.create({}, alice);
    const renewed = await service.renew(lease.id, alice, 120);
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.now() + 100_000);
    expect(log.at(-1)).toBe('expiry.set');
    await expect(service.renew(lease.id, alice, policy.resources.maxTtlSeconds + 60)).rejects.toMatchObject({
      code: 'lease.ttl_exceeds_policy',
    });
    expect((await service.get(lease.id, alice)).expiresAt).toBe(renewed.expiresAt);
  });

  it('release: settle, teardown, then released; a second release answers the same record; one audit entry', async () => {
    const { service, log, audit } = world();
    const { lease } = await service.create({}, alice);
    log.length = 0;
    const released = await service.release(lease.id, alice);
    expect(released.status).toBe('released');
    expect(log).toEqual([
      'lease ready→releasing',
      'returns.start',
      'runtime.remove',
      'calls.abandon',
      'link.destroy',
      'lease releasing→released',
      'retain',
      'expiry.clear',
      'quota.release',
    ]);
    expect(await service.release(lease.id, alice)).toEqual(released);
    expect(audit.filter((a) => a.action === 'lease.release')).toEqual([{ action: 'lease.release', actor: alice }]);
    await expect(service.active(lease.id, alice)).rejects.toMatchObject({ code: 'lease.released' });
  });
});

describe('LeaseService: expiry and reconcile', () => {
  it('the expiry timer of a lease not due fires again at its expiry; once due it expires the lease by system', async () => {
    const { service, store, audit } = world();
    const { lease } = await service.create({}, alice);
    expect(await service.onExpiryTimer(lease.id)).toEqual({ retryAtMs: Date.parse(lease.expiresAt) });
    await store.transitionLease(
      lease.id,
      (l) => ({ record: { ...l, expiresAt: new Date(Date.now() - 1).toISOString() }, reason: 'test' }),
      () => new Date(),
    );
    expect(await service.onExpiryTimer(lease.id)).toEqual({ done: true });
    expect((await service.get(lease.id, alice)).status).toBe('expired');
    expect(audit.at(-1)).toEqual({ action: 'lease.expire', actor: 'system' });
  });

  it('reconcile adopts a running lease, marks one whose container vanished lost, and reaps a container without a lease', async () => {
    const { service, containers } = world();
    const { lease: kept } = await service.create({}, alice);
    const { lease: vanished } = await service.create({}, alice);
    containers.delete(vanished.id);
    containers.set('sbx_orphan', { leaseId: 'sbx_orphan', containerId: 'ctr_orphan', running: true, paused: false, node: 'local' });
    const outcome = await service.reconcile();
    expect(outcome).toEqual({ adopted: [kept.id], removed: ['sbx_orphan'], lost: [vanished.id], failed: [], resumed: [] });
    expect((await service.get(vanished.id, alice)).status).toBe('lost');
    expect(containers.has('sbx_orphan')).toBe(false);
  });
});
