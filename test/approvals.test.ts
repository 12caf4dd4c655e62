/**
 * Tool approvals (policy `tools.approvals`, issue 16 part 6) against real sandboxes: a call the
 * rules ask about waits with nothing run until an approver key approves it (then it runs) or
 * denies it; an approval binds that call's fingerprint only; a user key is refused; the deadline
 * ends an unanswered call denied; a deny rule refuses at once. Every step audited.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { CallView } from '../contract/objects.js';
import { apiAs, eventually, execIn, REPO_ROOT, startCli, startHarness, useScratchDirs, type Harness } from './fixtures/index.js';

const scratch = useScratchDirs();
let h: Harness;
let leaseId: string;
let approver: string;
let user: string;
const api = apiAs(() => h.url);
const exec = execIn(() => h.client);

beforeAll(async () => {
  const dir = await scratch('sbx-approvals-');
  const defaults = parseYaml(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  await writeFile(join(dir, 'default.yaml'), JSON.stringify(defaults));
  const approvals = (timeoutSeconds: number) => ({
    timeoutSeconds,
    rules: [
      { decision: 'ask', tools: ['exec'], argv: ['touch /workspace/approved*'] },
      { decision: 'deny', effects: ['fs.write'], paths: ['/workspace/.github/workflows/**'] },
    ],
  });
  await writeFile(
    join(dir, 'ask.yaml'),
    JSON.stringify({ ...defaults, name: 'ask', version: 1, tools: { ...defaults.tools, approvals: approvals(3600) } }),
  );
  await writeFile(
    join(dir, 'ask-fast.yaml'),
    JSON.stringify({ ...defaults, name: 'ask-fast', version: 1, tools: { ...defaults.tools, approvals: approvals(10) } }),
  );
  h = await startHarness({ SBX_POLICY_DIR: dir });
  leaseId = (await h.client.createSandbox({ policy: 'ask' })).id;
  approver = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'reviewer', role: 'approver', tenant: 'default' })).body.secret;
  user = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'agent', role: 'user', tenant: 'default' })).body.secret;
}, 120_000);

afterAll(async () => {
  await h?.close();
});

const submit = (lease: string, argv: string[], callId: string) =>
  api(h.apiKey, 'POST', `/v1/sandboxes/${lease}/calls?wait=30`, { tool: 'exec', args: { argv }, callId });
/** The call once finished (the approval's run, or the deadline's end). */
const finished = async (lease: string, callId: string, timeoutMs: number): Promise<CallView> =>
  (await eventually(
    () => h.client.getCall(lease, callId),
    (c) => c.status === 'finished',
    timeoutMs,
  )) as CallView;
const exists = async (path: string): Promise<boolean> => (await exec(leaseId, `test -e ${path} && echo yes || echo no`)).stdout === 'yes\n';

describe('tool approvals', () => {
  it('an ask rule holds the call with nothing run; a user key cannot approve; an approver can, and the call runs once, bound to its fingerprint', async () => {
    const held = await submit(leaseId, ['touch', '/workspace/approved-1'], 'ask-1');
    expect([held.status, held.body.status]).toEqual([202, 'pending_approval']);
    const seen: string[] = [];
    for await (const e of h.client.events(leaseId, 'ask-1')) {
      seen.push(e.type);
      if (e.type === 'call.pending_approval') {
        expect(e).toMatchObject({ rule: 'tools.approvals.rules[0]', fingerprint: expect.stringMatching(/^sha256:/) });
        break;
      }
    }
    expect(seen).toEqual(['call.accepted', 'call.pending_approval']);
    expect(await exists('/workspace/approved-1')).toBe(false);

    expect((await api(user, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-1/approve`)).body.error.code).toBe('auth.approver_required');
    // The list of calls waiting: the approver's tenant's, never another's; a user key may not read it.
    const listed = await api(approver, 'GET', '/v1/approvals');
    expect(listed.body.approvals).toEqual([
      {
        sandboxId: leaseId,
        callId: 'ask-1',
        tool: 'exec',
        // The resolved call, defaults included: what would run is what is approved.
        args: expect.objectContaining({ argv: ['touch', '/workspace/approved-1'], timeoutMs: 600000, env: {} }),
        truncatedArgs: [],
        fingerprint: expect.stringMatching(/^sha256:/),
        rule: 'tools.approvals.rules[0]',
        createdAt: expect.any(String),
        expiresAt: expect.any(String),
      },
    ]);
    expect(Date.parse(listed.body.approvals[0].expiresAt) - Date.parse(listed.body.approvals[0].createdAt)).toBeGreaterThan(3500_000);
    expect((await api(user, 'GET', '/v1/approvals')).body.error.code).toBe('auth.approver_required');
    const stranger = (await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'other reviewer', role: 'approver', tenant: 'other' })).body
      .secret as string;
    expect((await api(stranger, 'GET', '/v1/approvals')).body).toEqual({ approvals: [] });
    const approved = await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-1/approve`);
    expect(approved.status).toBe(200);
    expect((await api(approver, 'GET', '/v1/approvals')).body).toEqual({ approvals: [] });
    const done = await finished(leaseId, 'ask-1', 30_000);
    expect(done.result).toMatchObject({ status: 'succeeded', receipt: { commitState: 'committed' } });
    expect(await exists('/workspace/approved-1')).toBe(true);
    // Twice is the same answer; nothing runs again.
    const again = await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-1/approve`);
    expect([again.status, again.body.status]).toEqual([200, 'finished']);

    // Other args are another call with another fingerprint: it waits for its own approval.
    const other = await submit(leaseId, ['touch', '/workspace/approved-2'], 'ask-2');
    expect(other.body.status).toBe('pending_approval');
    const denied = await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-2/deny`);
    expect(denied.body).toMatchObject({ status: 'finished', result: { status: 'denied', error: { code: 'approval.denied' } } });
    expect((await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-2/deny`)).status).toBe(200);
    expect((await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/ask-2/approve`)).body.error.code).toBe('approval.not_pending');
    expect(await exists('/workspace/approved-2')).toBe(false);

    const audited = async (action: string, callId: string) =>
      (await api(h.apiKey, 'GET', `/v1/audit?action=${action}&target=call:${callId}`)).body.entries;
    expect(await audited('call.approve', 'ask-1')).toMatchObject([{ details: { sandboxId: leaseId, fingerprint: done.fingerprint } }]);
    expect(await audited('call.deny', 'ask-2')).toHaveLength(1);
  });

  it(
    'a call nobody answers ends denied at its deadline (approval.expired); approving it then is 409 approval.expired',
    { timeout: 60_000 },
    async () => {
      const fast = (await h.client.createSandbox({ policy: 'ask-fast' })).id;
      expect((await submit(fast, ['touch', '/workspace/approved-late'], 'late')).body.status).toBe('pending_approval');
      const ended = await finished(fast, 'late', 40_000);
      expect(ended.result).toMatchObject({ status: 'denied', error: { code: 'approval.expired' } });
      expect((await api(approver, 'POST', `/v1/sandboxes/${fast}/calls/late/approve`)).body.error.code).toBe('approval.expired');
      await h.client.releaseSandbox(fast);
    },
  );

  it(
    'releasing a sandbox with a long grace ends a call waiting for approval cancelled at once, nothing run (no approval can come any more)',
    { timeout: 60_000 },
    async () => {
      const lease = (await h.client.createSandbox({ policy: 'ask' })).id;
      expect((await submit(lease, ['touch', '/workspace/approved-never'], 'held-at-release')).body.status).toBe('pending_approval');
      // A grace of 10 minutes: waited for, it would outlast the test's timeout.
      const released = await h.client.releaseSandbox(lease, { graceMs: 600_000 });
      expect(released.status).toBe('released');
      expect((await h.client.getCall(lease, 'held-at-release')).result).toMatchObject({
        status: 'cancelled',
        error: { code: 'execution.cancelled' },
        receipt: null,
      });
      expect((await api(approver, 'GET', '/v1/approvals')).body.approvals.map((a: { callId: string }) => a.callId)).not.toContain(
        'held-at-release',
      );
    },
  );

  it('sbx exec says on stderr that its call waits for approval; a denial exits 126, Ctrl-C cancels the waiting call and exits 130', async () => {
    const denied = startCli(h, ['exec', leaseId, '--no-stdin', '--', 'touch', '/workspace/approved-cli-1']);
    denied.child.stdin.end();
    const said = await denied.stderrMatching(/waiting for approval/);
    const callId = /approval of call (\S+) \(policy rule tools\.approvals\.rules\[0\], until \S+\); Ctrl-C cancels it/.exec(said)?.[1];
    expect(callId).toBeDefined();
    expect((await api(approver, 'POST', `/v1/sandboxes/${leaseId}/calls/${callId}/deny`)).status).toBe(200);
    const deniedEnd = await denied.done;
    expect([deniedEnd.code, deniedEnd.stderr]).toEqual([126, expect.stringContaining('approval.denied')]);

    const interrupted = startCli(h, ['exec', leaseId, '--no-stdin', '--', 'touch', '/workspace/approved-cli-2']);
    interrupted.child.stdin.end();
    const waiting = /approval of call (\S+) /.exec(await interrupted.stderrMatching(/waiting for approval/))![1]!;
    interrupted.child.kill('SIGINT');
    expect((await interrupted.done).code).toBe(130);
    expect((await h.client.getCall(leaseId, waiting)).result).toMatchObject({ status: 'cancelled', receipt: null });
    expect((await api(approver, 'GET', '/v1/approvals')).body.approvals.map((a: { callId: string }) => a.callId)).not.toContain(waiting);
    expect(await exists('/workspace/approved-cli-1')).toBe(false);
    expect(await exists('/workspace/approved-cli-2')).toBe(false);
  });

  it('a deny rule on the resolved paths refuses the call at once: 403 policy.tool_denied naming the rule', async () => {
    const r = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/calls?wait=30`, {
      tool: 'write_file',
      args: { path: '/workspace/x/../.github/workflows/ci.yml', content: 'on: push\n' },
    });
    expect([r.status, r.body.error.code, r.body.error.details.rule]).toEqual([403, 'policy.tool_denied', 'tools.approvals.rules[1]']);
    expect(await exists('/workspace/.github/workflows/ci.yml')).toBe(false);
  });
});

describe('the MCP server and approvals', () => {
  it(
    'a tool call held for approval is answered as waiting, nothing run; asked again after the approval, the same call gives its result',
    { timeout: 60_000 },
    async () => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [join(REPO_ROOT, 'dist/cli/sbx.js'), 'mcp', '--policy', 'ask'],
        env: { ...(process.env as Record<string, string>), SBX_URL: h.url, SBX_API_KEY: h.apiKey },
        stderr: 'pipe',
      });
      const client = new Client({ name: 'sbx-test', version: '0.0.0' });
      await client.connect(transport);
      try {
        const ask = { argv: ['touch', '/workspace/approved-mcp'] };
        const first = CallToolResultSchema.parse(await client.callTool({ name: 'exec', arguments: ask }));
        const held = first.structuredContent as { status: string; callId: string; sandboxId: string };
        expect([first.isError, held.status]).toEqual([true, 'pending_approval']);
        expect(first.content.map((c) => (c.type === 'text' ? c.text : '')).join('')).toContain('waits for a person');
        expect((await api(approver, 'POST', `/v1/sandboxes/${held.sandboxId}/calls/${held.callId}/approve`)).status).toBe(200);
        await finished(held.sandboxId, held.callId, 30_000);
        const again = CallToolResultSchema.parse(await client.callTool({ name: 'exec', arguments: ask }));
        expect([again.isError, (again.structuredContent as { callId: string }).callId]).toEqual([false, held.callId]);
      } finally {
        await client.close();
      }
    },
  );
});
