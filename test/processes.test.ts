/**
 * The sandbox's processes against a real sandbox: the listing (owner by call, the agent's own
 * processes not killable), signals limited to the tool user's processes (403 for init, the agent
 * and its worker; 404 for an unknown pid; 400 for a bad signal name), each a call with a receipt
 * and the signal audited with its sender; the SDK's `processes` and `sbx ps` / `sbx kill`.
 */
import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import type { ProcessInfo } from '../contract/tools/processes.js';
import { Sandbox, SbxError } from '../sdk/index.js';
import { runCli, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;

useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${h.url}/v1/sandboxes/${leaseId}${path}`, {
    method,
    headers: { authorization: `Bearer ${h.apiKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: await response.json() };
}

async function list(): Promise<ProcessInfo[]> {
  const r = await api('GET', '/processes');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.processes as ProcessInfo[];
}

async function call(tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const r = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 60 });
  if (!('receipt' in r)) throw new Error(`${tool} did not finish`);
  return r;
}

describe('GET /v1/sandboxes/:id/processes', () => {
  it("lists every process with its owner; init, the agent and its worker are listed and not killable; a background task is its call's", async () => {
    await call('stat', { path: '/workspace' }); // the tool-user worker runs from here on
    const background = await h.client.submitCall(leaseId, 'exec', { cmd: 'sleep 300', background: true }, { waitSeconds: 30 });
    const taskId = background.callId;
    try {
      const r = await api('GET', '/processes');
      expect(r.status).toBe(200);
      expect(r.body.callId).toMatch(/^call_/);
      expect(r.body.receiptId).toMatch(/^rcpt_/);
      const processes = r.body.processes as ProcessInfo[];
      const init = processes.find((p) => p.pid === 1)!;
      expect(init).toMatchObject({ user: 'root', killable: false, owner: null });
      const rootOnes = processes.filter((p) => p.uid === 0);
      expect(rootOnes.length).toBeGreaterThanOrEqual(2);
      expect(rootOnes.every((p) => !p.killable)).toBe(true);
      const worker = processes.find((p) => p.command.includes('--tool-user-worker'))!;
      expect(worker).toMatchObject({ user: 'sandbox', killable: false });
      const sleep = processes.find((p) => p.command.includes('sleep 300'))!;
      expect(sleep).toMatchObject({ user: 'sandbox', killable: true, owner: { kind: 'call', id: taskId } });
      expect(sleep.rssBytes).toBeGreaterThan(0);
      expect(sleep.cpuTimeMs).toBeGreaterThanOrEqual(0);
      // The listing is a call: its receipt is readable like any other.
      const receipt = await fetch(`${h.url}/v1/receipts/${r.body.receiptId}`, { headers: { authorization: `Bearer ${h.apiKey}` } });
      expect(((await receipt.json()) as { tool: string }).tool).toBe('list_processes');
    } finally {
      await h.client.cancelCall(leaseId, taskId).catch(() => undefined);
    }
  });

  it("a running foreground exec is listed as its call's while it runs, and a signal to it ends the call", async () => {
    const running = await h.client.submitCall(leaseId, 'exec', { argv: ['sleep', '120'] }, { waitSeconds: 0 });
    const execId = running.callId;
    try {
      // The listing runs beside the exec (it declares no access), so it sees the exec running.
      let sleep: ProcessInfo | undefined;
      await expect.poll(async () => (sleep = (await list()).find((p) => p.command === 'sleep 120')), { timeout: 30_000 }).toBeDefined();
      expect(sleep!.owner).toEqual({ kind: 'call', id: execId });
      const sent = await api('POST', `/processes/${sleep!.pid}/signal`, { signal: 'SIGTERM' });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      expect(sent.body).toMatchObject({ pid: sleep!.pid, signal: 'SIGTERM', process: { command: 'sleep 120' } });
      expect(sent.body.receiptId).toMatch(/^rcpt_/);
      const view = await h.client.getCall(leaseId, execId);
      const ended = view.result ?? (await waitResult(execId));
      expect(ended.signal).toBe('SIGTERM');
      // Who sent it: the audit log has the signal with its actor and call.
      const audit = await fetch(
        `${h.url}/v1/audit?action=process.signal&target=${encodeURIComponent(`process:${leaseId}.${sleep!.pid}`)}`,
        {
          headers: { authorization: `Bearer ${h.apiKey}` },
        },
      );
      const entries = ((await audit.json()) as { entries: unknown }).entries as Array<{ actor: unknown; details: Record<string, unknown> }>;
      expect(entries[0]).toMatchObject({
        actor: { keyId: 'bootstrap' },
        details: { signal: 'SIGTERM', status: 'succeeded', callId: sent.body.callId },
      });
    } finally {
      await h.client.cancelCall(leaseId, execId).catch(() => undefined);
    }
  });

  it('signals only the tool user: init, the agent and its worker 403 process.not_killable; an unknown pid 404; a bad signal 400', async () => {
    const processes = await list();
    const agent = processes.find((p) => p.uid === 0 && p.pid !== 1)!;
    const worker = processes.find((p) => p.command.includes('--tool-user-worker'))!;
    for (const pid of [1, agent.pid, worker.pid]) {
      const r = await api('POST', `/processes/${pid}/signal`, { signal: 'SIGKILL' });
      expect(r.status, `pid ${pid}`).toBe(403);
      expect(r.body.error.code).toBe('process.not_killable');
      expect(r.body.error.details.callId).toMatch(/^call_/);
    }
    const after = await list();
    expect(after.find((p) => p.pid === agent.pid)).toBeDefined();
    expect(after.find((p) => p.pid === worker.pid)).toBeDefined();
    const unknown = await api('POST', '/processes/4000000/signal', { signal: 'SIGTERM' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('process.not_found');
    for (const [path, body] of [
      ['/processes/1/signal', { signal: 'SIGFOO' }],
      ['/processes/1/signal', { signal: 9 }],
      ['/processes/0/signal', { signal: 'SIGTERM' }],
      ['/processes/abc/signal', {}],
      ['/processes/99999999/signal', {}],
    ] as const) {
      const r = await api('POST', path, body);
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(r.body.error.code).toBe('input.invalid');
    }
  });
});

async function waitResult(callId: string): Promise<ToolResult> {
  let result: ToolResult | null | undefined;
  await expect.poll(async () => (result = (await h.client.getCall(leaseId, callId)).result), { timeout: 30_000 }).toBeTruthy();
  return result!;
}

describe('interfaces', () => {
  it('the SDK: sandbox.processes.list() and signal(), a refusal as SbxError process.not_killable', async () => {
    const sbx = await Sandbox.connect(leaseId, { url: h.url, apiKey: h.apiKey });
    const task = await h.client.submitCall(leaseId, 'exec', { argv: ['sleep', '301'], background: true }, { waitSeconds: 30 });
    try {
      const { processes } = await sbx.processes.list();
      const sleep = processes.find((p) => p.command === 'sleep 301')!;
      expect(sleep.killable).toBe(true);
      const sent = await sbx.processes.signal(sleep.pid, 'SIGKILL');
      expect(sent.signal).toBe('SIGKILL');
      expect((await waitResult(task.callId)).signal).toBe('SIGKILL');
      const refused = await sbx.processes.signal(1).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(SbxError);
      expect((refused as SbxError).info.code).toBe('process.not_killable');
    } finally {
      await h.client.cancelCall(leaseId, task.callId).catch(() => undefined);
    }
  });

  it('the CLI: sbx ps lists, sbx kill signals (by name or number) and refuses init', async () => {
    const target = { url: h.url, apiKey: h.apiKey };
    const task = await h.client.submitCall(leaseId, 'exec', { argv: ['sleep', '302'], background: true }, { waitSeconds: 30 });
    try {
      const ps = await runCli(target, ['ps', leaseId]);
      expect(ps.code, ps.stderr).toBe(0);
      const row = ps.stdout.split('\n').find((l) => l.endsWith('sleep 302'))!;
      expect(row).toContain(`call:${task.callId}`);
      const pid = Number(row.trim().split(/\s+/)[0]);
      const kill = await runCli(target, ['kill', leaseId, String(pid), '9']);
      expect(kill.code, kill.stderr).toBe(0);
      expect(kill.stdout).toContain('sent SIGKILL');
      expect((await waitResult(task.callId)).signal).toBe('SIGKILL');
      const refused = await runCli(target, ['kill', leaseId, '1']);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain('process.not_killable');
      expect((await runCli(target, ['kill', leaseId, '1', 'SIGFOO'])).code).not.toBe(0);
    } finally {
      await h.client.cancelCall(leaseId, task.callId).catch(() => undefined);
    }
  });
});
