/**
 * The bounds of interactive execution (issue 13) under pressure, against a real sandbox:
 * `terminals.max` and `sessions.max` hold under concurrent creates (the place is taken atomically,
 * given back when a terminal or session ends or its start fails), and piped stdin a process does
 * not read is bounded (`429 call.stdin_full`) without losing a byte of what was accepted.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leaseKeys } from '../contract/queue.js';
import type { ToolResult } from '../contract/objects.js';
import { apiAs, eventually, execIn, putPolicyVariant, useHarness } from './fixtures/index.js';

const h = useHarness();
const api = apiAs(() => h.url);
const MAX = 3;
const POLICY = 'interactive-limits';
let leaseId: string;
const call = (method: string, path: string, body?: unknown) => api(h.apiKey, method, `/v1/sandboxes/${leaseId}${path}`, body);
const run = execIn(() => h.client);
const exec = (cmd: string) => run(leaseId, cmd);

beforeAll(async () => {
  await putPolicyVariant(h, POLICY, (policy) => {
    policy.terminals = { max: MAX, idleTimeoutSeconds: 3600, maxDurationSeconds: 3600 };
    policy.sessions = { max: MAX, idleTimeoutSeconds: 3600 };
  });
  leaseId = (await h.client.createSandbox({ policy: POLICY })).id;
});

afterAll(async () => {
  if (leaseId) await h.client.releaseSandbox(leaseId);
  await api(h.apiKey, 'DELETE', `/v1/policies/${POLICY}`);
});

/** Statuses of `n` requests sent at once. */
async function concurrently(n: number, send: () => Promise<{ status: number; body: any }>) {
  const answers = await Promise.all(Array.from({ length: n }, send));
  return { answers, count: (status: number) => answers.filter((a) => a.status === status).length };
}

describe('terminals.max under concurrent creates', () => {
  it('N+5 creates at once against max N: exactly N start, the rest 429; a failed start and deleted terminals give their places back', async () => {
    const failed = await call('POST', '/terminals', { cols: 80, rows: 24, cwd: '/workspace/missing-dir', cmd: 'sleep 600' });
    expect([failed.status, failed.body.error.code]).toEqual([400, 'input.cwd_not_found']);
    const { answers, count } = await concurrently(MAX + 5, () => call('POST', '/terminals', { cols: 80, rows: 24, cmd: 'sleep 600' }));
    const ids = answers.filter((a) => a.status === 201).map((a) => a.body.terminalId as string);
    try {
      expect([count(201), count(429)]).toEqual([MAX, 5]);
      for (const a of answers.filter((x) => x.status === 429)) expect(a.body.error).toMatchObject({ code: 'terminal.limit_reached' });
      // Nothing was started for the refused ones.
      expect((await exec('pgrep -fc "^sleep 60[0]$" || true')).stdout.trim()).toBe(String(MAX));
    } finally {
      for (const id of ids) await call('DELETE', `/terminals/${id}`);
    }
    for (const id of ids)
      await eventually(
        async () => (await call('GET', `/terminals/${id}`)).body.status,
        (s) => s === 'exited',
      );
    // Every place is free again: N more start at once.
    const again = await concurrently(MAX, () => call('POST', '/terminals', { cols: 80, rows: 24, cmd: 'sleep 600' }));
    for (const a of again.answers) if (a.status === 201) await call('DELETE', `/terminals/${a.body.terminalId}`);
    expect(again.count(201)).toBe(MAX);
  });
});

describe('sessions.max under concurrent creates', () => {
  it('N+5 creates at once against max N: exactly N start, the rest 429; a failed start and deleted sessions give their places back', async () => {
    const failed = await call('POST', '/sessions', { cwd: '/workspace/missing-dir' });
    expect([failed.status, failed.body.error.code]).toEqual([400, 'input.cwd_not_found']);
    const { answers, count } = await concurrently(MAX + 5, () => call('POST', '/sessions', {}));
    const ids = answers.filter((a) => a.status === 201).map((a) => a.body.sessionId as string);
    try {
      expect([count(201), count(429)]).toEqual([MAX, 5]);
      for (const a of answers.filter((x) => x.status === 429)) expect(a.body.error).toMatchObject({ code: 'session.limit_reached' });
    } finally {
      for (const id of ids) expect((await call('DELETE', `/sessions/${id}`)).status).toBeLessThan(300);
    }
    const again = await concurrently(MAX, () => call('POST', '/sessions', {}));
    for (const a of again.answers) if (a.status === 201) await call('DELETE', `/sessions/${a.body.sessionId}`);
    expect(again.count(201)).toBe(MAX);
  });
});

describe('piped stdin a process does not read', () => {
  it('is bounded at 8 MiB unread (429 call.stdin_full, nothing of the refused write queued); once the process reads, every accepted byte arrives in order', async () => {
    const go = `/tmp/stdin-go-${randomBytes(4).toString('hex')}`;
    const submit = await call('POST', '/calls', {
      tool: 'exec',
      args: { cmd: `while [ ! -e ${go} ]; do sleep 0.05; done; sha256sum`, stdin: 'pipe', background: true, timeoutMs: 300_000 },
    });
    expect(submit.status).toBe(202);
    const callId = submit.body.callId as string;
    const pendingKey = leaseKeys(h.config.redisPrefix, leaseId).inputPending(callId);
    const accepted: Buffer[] = [];
    let refused: { status: number; body: any } | null = null;
    // The process never reads: at 1 MiB a write, the ninth is over the bound.
    for (let i = 0; i < 12 && !refused; i += 1) {
      const chunk = randomBytes(1024 * 1024);
      const r = await call('POST', `/calls/${callId}/stdin`, { dataBase64: chunk.toString('base64') });
      if (r.status === 204) accepted.push(chunk);
      else refused = r;
    }
    expect(accepted).toHaveLength(8);
    expect(refused?.status).toBe(429);
    expect(refused?.body.error).toMatchObject({
      code: 'call.stdin_full',
      retryability: 'safe',
      details: { pendingBytes: 8 * 1024 * 1024, limitBytes: 8 * 1024 * 1024, sizeBytes: 1024 * 1024 },
    });
    // Even one byte more is refused while nothing was read; the counter says what waits.
    expect((await call('POST', `/calls/${callId}/stdin`, { data: 'x' })).status).toBe(429);
    expect(Number(await h.redis.get(pendingKey))).toBe(8 * 1024 * 1024);
    // The process starts reading: the budget comes back and the next write is taken.
    expect((await exec(`touch ${go}`)).status).toBe('succeeded');
    const last = randomBytes(1024 * 1024);
    await eventually(
      async () => (await call('POST', `/calls/${callId}/stdin`, { dataBase64: last.toString('base64') })).status,
      (status) => status === 204,
    );
    accepted.push(last);
    expect((await call('POST', `/calls/${callId}/stdin`, { eof: true })).status).toBe(204);
    const done = await eventually(
      async () => (await call('GET', `/calls/${callId}`)).body as { status: string; result: ToolResult | null },
      (c) => c.status === 'finished',
      60_000,
    );
    expect(done.result?.status).toBe('succeeded');
    const digest = createHash('sha256').update(Buffer.concat(accepted)).digest('hex');
    expect(done.result?.stdout.split(' ')[0]).toBe(digest);
    // The call's stream and counter went with it.
    expect(await h.redis.exists(pendingKey)).toBe(0);
  }, 120_000);
});
