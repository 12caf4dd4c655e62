/**
 * Observability against a real control plane, Docker engine and Redis: `GET /metrics` moves
 * with leases, calls, egress decisions and reconciling; log lines of a call carry its sandbox,
 * call and attempt ids, in the control plane and in the agent; `GET /v1/sandboxes` filters by
 * label and status.
 */
import { spawnSync } from 'node:child_process';
import { copyFile, readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorBody } from '../contract/errors.js';
import type { ToolResult } from '../contract/objects.js';
import { REPO_ROOT, docker, startHarness, type Harness, execIn, eventually, useScratchDirs } from './fixtures/index.js';

/** Temporary directories of this file, removed after its tests. */
const scratch = useScratchDirs();

let h: Harness;
let upstream: Server;
let upstreamPort: number;
/** Every line the control plane logged, parsed. */
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  upstream = createServer((_req, res) => res.end('hello\n'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.2', resolve));
  upstreamPort = (upstream.address() as AddressInfo).port;
  const policyDir = await scratch('sbx-obs-policies-');
  await copyFile(join(REPO_ROOT, 'policies', 'default.yaml'), join(policyDir, 'default.yaml'));
  const defaults = (await import('yaml')).parse(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  // The destination is on loopback, which only a cidr rule reaches; 127.0.0.3 is denied.
  const egress = {
    ...defaults,
    name: 'obs-egress',
    version: 1,
    network: { mode: 'allowlist', allow: [{ cidr: '127.0.0.2/32', ports: [upstreamPort] }] },
  };
  await writeFile(join(policyDir, 'obs-egress.yaml'), JSON.stringify(egress));
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) logLines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  h = await startHarness({ SBX_POLICY_DIR: policyDir, SBX_LOG_LEVEL: 'info' }, { logStream: sink });
});

afterAll(async () => {
  await h?.close();
  upstream?.close();
});

/** `GET /metrics` without a key: the samples as `name{labels}` → value. */
async function scrape(): Promise<Map<string, number>> {
  const response = await fetch(`${h.url}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toContain('text/plain');
  const samples = new Map<string, number>();
  for (const line of (await response.text()).split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) samples.set(match[1]!, Number(match[2]));
  }
  return samples;
}

/** The change of each sample between two scrapes (absent = 0). */
function moved(before: Map<string, number>, after: Map<string, number>, name: string): number {
  return (after.get(name) ?? 0) - (before.get(name) ?? 0);
}

const exec = execIn(() => h.client, { args: { timeoutMs: 30_000 } });

async function list(query: string, key = h.apiKey): Promise<{ status: number; body: any }> {
  const response = await fetch(`${h.url}/v1/sandboxes${query}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: response.status, body: await response.json() };
}

describe('GET /metrics', () => {
  it('moves with a lease, its calls, the call queue, egress decisions, a reconcile and the pools', async () => {
    const before = await scrape();
    // Every counter is there from the start, at 0 when nothing happened yet.
    for (const name of [
      'sbx_reconcile_actions_total{action="lost"}',
      'sbx_egress_decisions_total{decision="denied"}',
      'sbx_leases{state="ready"}',
    ]) {
      expect(before.has(name), name).toBe(true);
    }

    const lease = await h.client.createSandbox();
    expect((await exec(lease.id, 'echo ok')).status).toBe('succeeded');
    expect((await exec(lease.id, 'exit 3')).status).toBe('failed');
    // A call still running: one job the agent has taken from the queue.
    const running = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 3', timeoutMs: 30_000 });
    const during = await scrape();
    expect(
      (during.get('sbx_call_queue_jobs{state="active"}') ?? 0) + (during.get('sbx_call_queue_jobs{state="waiting"}') ?? 0),
    ).toBeGreaterThanOrEqual(1);
    // The one Docker engine is node `local`; this file's owner has the one sandbox.
    expect(during.get('sbx_sandboxes{node="local"}')).toBe(1);
    await eventually(
      () => h.client.getCall(lease.id, running.callId),
      (c) => c.status === 'finished',
      15_000,
    );

    const egressLease = await h.client.createSandbox({ policy: 'obs-egress' });
    const reached = await exec(egressLease.id, `curl -sS --max-time 10 http://127.0.0.2:${upstreamPort}/`);
    expect(reached.stdout).toBe('hello\n');
    const refused = await exec(egressLease.id, `curl -fsS --max-time 10 http://127.0.0.3:${upstreamPort}/`);
    expect(refused.exitCode).not.toBe(0);

    // A sandbox whose container vanishes is lost at the next reconcile.
    await docker('rm', '-f', '-v', `sbx-${egressLease.id}`);
    await eventually(
      () => h.client.getSandbox(egressLease.id),
      (l) => l.status === 'lost',
      15_000,
    );

    h.plane.metrics.setPoolSize('default', 'ready', 3);
    const after = await scrape();
    expect(moved(before, after, 'sbx_lease_create_seconds_count{path="cold"}')).toBe(2);
    // Succeeded: echo, sleep, the allowed curl; failed: exit 3, the refused curl.
    expect(moved(before, after, 'sbx_calls_total{tool="exec",status="succeeded"}')).toBe(3);
    expect(moved(before, after, 'sbx_calls_total{tool="exec",status="failed"}')).toBe(2);
    expect(moved(before, after, 'sbx_call_duration_seconds_count{tool="exec"}')).toBe(5);
    expect(moved(before, after, 'sbx_egress_decisions_total{decision="allowed"}')).toBe(1);
    expect(moved(before, after, 'sbx_egress_decisions_total{decision="denied"}')).toBe(1);
    expect(moved(before, after, 'sbx_reconcile_actions_total{action="lost"}')).toBe(1);
    expect(after.get('sbx_leases{state="ready"}')).toBe(1);
    expect(after.get('sbx_leases{state="lost"}')).toBe(1);
    expect(after.get('sbx_pool_sandboxes{pool="default",state="ready"}')).toBe(3);
    // The default process metrics come along, on this plane's own registry.
    expect(after.has('sbx_process_cpu_seconds_total')).toBe(true);

    const text = await (await fetch(`${h.url}/metrics`)).text();
    expect(text).not.toContain(lease.id);
    await h.client.releaseSandbox(lease.id);
  });

  it('two control planes in one process keep their own registries', async () => {
    const peer = await h.startPeer();
    try {
      const own = await scrape();
      const response = await fetch(`${peer.client.baseUrl}/metrics`);
      const text = await response.text();
      expect(response.status).toBe(200);
      // The peer has served no call: its counters start at nothing, whatever this plane counted.
      expect(own.get('sbx_calls_total{tool="exec",status="succeeded"}')).toBeGreaterThan(0);
      expect(text).not.toContain('sbx_calls_total{tool="exec"');
    } finally {
      await peer.close();
    }
  });
});

describe('structured logs', () => {
  it("a call's log lines carry sandboxId, callId and attemptId, in the control plane and in the agent", async () => {
    const lease = await h.client.createSandbox();
    const call = (await h.client.submitCall(lease.id, 'exec', { argv: ['true'] }, { waitSeconds: 60 })) as ToolResult;
    const attemptId = call.receipt!.attemptId;
    const finished = (await eventually(
      () => logLines.find((l) => l.msg === 'call finished' && l.callId === call.callId),
      (l) => l !== undefined,
      15_000,
    ))!;
    expect(finished).toMatchObject({ sandboxId: lease.id, callId: call.callId, attemptId, tool: 'exec', status: 'succeeded' });
    expect(logLines.find((l) => l.msg === 'call started' && l.callId === call.callId)).toMatchObject({ sandboxId: lease.id, attemptId });
    // fastify's own request lines of a call route name the sandbox and the call.
    await h.client.getCall(lease.id, call.callId);
    const requestLine = (await eventually(
      () => logLines.find((l) => l.msg === 'request completed' && l.callId === call.callId),
      (l) => l !== undefined,
      15_000,
    ))!;
    expect(requestLine.sandboxId).toBe(lease.id);

    // The agent logs to stderr, which docker logs replays on its own stderr.
    const logs = spawnSync('docker', ['logs', `sbx-${lease.id}`], { encoding: 'utf8' });
    const lines = `${logs.stdout}\n${logs.stderr}`
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.find((l) => l.msg === 'call finished' && l.callId === call.callId)).toMatchObject({
      sandboxId: lease.id,
      attemptId,
      status: 'succeeded',
    });
    await h.client.releaseSandbox(lease.id);
  });
});

describe('GET /v1/sandboxes filters', () => {
  it('label=k=v filters (repeated: all must match), status= filters, and bad filters are 400 input.invalid', async () => {
    const x = await h.client.createSandbox({ labels: { team: 'obs', job: 'x' } });
    const y = await h.client.createSandbox({ labels: { team: 'obs', job: 'y=1' } });
    const ids = (answer: { body: any }): string[] => answer.body.sandboxes.map((s: { id: string }) => s.id).sort();

    expect(ids(await list('?label=team=obs'))).toEqual([x.id, y.id].sort());
    expect(ids(await list('?label=team=obs&label=job=x'))).toEqual([x.id]);
    // The value is everything after the first `=`.
    expect(ids(await list(`?label=${encodeURIComponent('job=y=1')}`))).toEqual([y.id]);
    expect(ids(await list('?label=team=other'))).toEqual([]);
    expect(ids(await list('?label=team=obs&label=job=x&label=job=y=1'))).toEqual([]);

    await h.client.releaseSandbox(x.id);
    expect(ids(await list('?label=team=obs&status=ready'))).toEqual([y.id]);
    expect(ids(await list('?label=team=obs&status=released'))).toEqual([x.id]);
    expect(ids(await list('?label=team=obs&status=ready&status=released'))).toEqual([x.id, y.id].sort());

    for (const [query, field] of [
      ['?label=team', 'query.label'],
      ['?label==x', 'query.label'],
      ['?status=bogus', 'query.status'],
      ['?colour=red', 'query'],
    ] as const) {
      const answer = await list(query);
      expect(answer.status, query).toBe(400);
      const { error } = ErrorBody.parse(answer.body);
      expect(error.code).toBe('input.invalid');
      expect(JSON.stringify(error.details), query).toContain(field);
    }
    await h.client.releaseSandbox(y.id);
  });
});
