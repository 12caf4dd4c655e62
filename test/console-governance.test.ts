/**
 * The console's approvals and proposals pages end to end, in headless Chromium against a real
 * control plane and real sandboxes: a call a policy's tool rules hold is listed with what would
 * run and is approved (it runs) or denied (nothing runs) by a click; a sandbox's denied egress
 * becomes a proposal shown with its evidence and diff, and Accept writes the next version — or,
 * when the policy changed after the page was loaded, shows the conflict and the new proposal.
 * Everything made is removed in afterAll, also when a test failed.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  REPO_ROOT,
  apiAs,
  buildConsole,
  execIn,
  launchConsoleBrowser,
  openConsole,
  startHarness,
  useScratchDirs,
  type ConsoleBrowser,
  type Harness,
} from './fixtures/index.js';

const scratch = useScratchDirs();
let h: Harness;
let ui: ConsoleBrowser;
let page: Page;
let consoleDir: string;
let leaseId: string;
const pageErrors: string[] = [];
const api = apiAs(() => h.url);
const exec = execIn(() => h.client);
const eventually = <T>(read: () => Promise<T> | T) => expect.poll(read, { timeout: 30_000, interval: 100 });

const go = (hash: string): Promise<void> => openConsole(page, h.url, h.apiKey, hash);

beforeAll(async () => {
  const dir = await scratch('sbx-console-governance-');
  const defaults = parseYaml(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  await writeFile(join(dir, 'default.yaml'), JSON.stringify(defaults));
  await writeFile(
    join(dir, 'gov.yaml'),
    JSON.stringify({
      ...defaults,
      name: 'gov',
      version: 1,
      network: { mode: 'allowlist', allow: [{ host: 'a.console.test', ports: [80] }] },
      tools: {
        ...defaults.tools,
        approvals: {
          timeoutSeconds: 3600,
          rules: [
            { decision: 'ask', tools: ['exec'], argv: ['touch /workspace/ok-*'] },
            { decision: 'ask', tools: ['write_file'], paths: ['/workspace/big-*'] },
          ],
        },
      },
    }),
  );
  consoleDir = await buildConsole();
  h = await startHarness({ SBX_POLICY_DIR: dir, SBX_CONSOLE_DIR: consoleDir });
  ui = await launchConsoleBrowser();
  page = ui.page;
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.route(
    (url) => !url.href.startsWith(h.url),
    (route) => route.abort(),
  );
  leaseId = (await h.client.createSandbox({ policy: 'gov' })).id;
}, 120_000);

afterAll(async () => {
  await ui?.close(consoleDir);
  await h?.close();
}, 60_000);

const submit = (argv: string[], callId: string) =>
  api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/calls`, { tool: 'exec', args: { argv }, callId });
const exists = async (path: string): Promise<boolean> => (await exec(leaseId, `test -e ${path} && echo yes || echo no`)).stdout === 'yes\n';

describe('console: approvals', () => {
  it('lists each held call with what would run and its rule; Approve runs it, Deny ends it denied with nothing run', async () => {
    expect((await submit(['touch', '/workspace/ok-approved'], 'ui-approve')).body.status).toBe('pending_approval');
    expect((await submit(['touch', '/workspace/ok-denied'], 'ui-deny')).body.status).toBe('pending_approval');

    await go('approvals');
    const approveRow = page.locator('#approvals tr[data-call="ui-approve"]');
    const denyRow = page.locator('#approvals tr[data-call="ui-deny"]');
    await approveRow.waitFor();
    const cells = await approveRow.locator('td').allTextContents();
    expect(cells.slice(0, 3)).toEqual([leaseId, 'ui-approve', 'exec']);
    expect(cells[3]).toContain('touch /workspace/ok-approved');
    expect(cells[4]).toBe('tools.approvals.rules[0]');
    expect(cells[7]).toMatch(/^(59m|1h)/);
    await ui.shot('approvals');

    await approveRow.locator('button[data-action=approve]').click();
    await eventually(() => page.textContent('#banner')).toContain('Approved ui-approve');
    await approveRow.waitFor({ state: 'detached' });
    await eventually(async () => (await h.client.getCall(leaseId, 'ui-approve')).result?.status).toBe('succeeded');
    expect(await exists('/workspace/ok-approved')).toBe(true);

    await denyRow.locator('button[data-action=deny]').click();
    await eventually(() => page.textContent('#banner')).toContain('Denied ui-deny');
    expect((await h.client.getCall(leaseId, 'ui-deny')).result).toMatchObject({ status: 'denied', error: { code: 'approval.denied' } });
    expect(await exists('/workspace/ok-denied')).toBe(false);
    await eventually(() => page.textContent('#approvals + p.empty')).toContain('No call waits for approval');

    const audit = (await api(h.apiKey, 'GET', '/v1/audit?action=call.approve&target=call:ui-approve')).body.entries;
    expect(audit).toMatchObject([{ actor: { role: 'admin' }, details: { sandboxId: leaseId } }]);
    expect(pageErrors).toEqual([]);
  });

  it('an argument too long for the list is cut there, said so, and shown whole on request; a row stays as it is across reloads', async () => {
    const content = `${'a'.repeat(3000)}THE-END`;
    const held = await api(h.apiKey, 'POST', `/v1/sandboxes/${leaseId}/calls`, {
      tool: 'write_file',
      args: { path: '/workspace/big-1', content },
      callId: 'ui-big',
    });
    expect(held.body.status).toBe('pending_approval');
    await go('approvals');
    const row = page.locator('#approvals tr[data-call="ui-big"]');
    await row.waitFor();
    expect(await row.locator('code.effect').textContent()).toBe('/workspace/big-1');
    expect(await row.locator('pre').textContent()).not.toContain('THE-END');
    expect(await row.locator('details p').textContent()).toContain('cut for this list: content');
    await row.locator('button[data-action=whole-args]').click();
    await eventually(() => row.locator('pre').textContent()).toContain('THE-END');
    await ui.shot('approvals-whole-args');
    // The list reloads every 5 s; the row read whole is the same element after a reload.
    await row.evaluate((el) => el.setAttribute('data-marked', 'yes'));
    const reloaded = page.waitForResponse((r) => r.url().endsWith('/v1/approvals'));
    await page.click('#approvals-refresh');
    await reloaded;
    await eventually(() => page.locator('#approvals tr[data-marked=yes] pre').textContent()).toContain('THE-END');
    await row.locator('button[data-action=deny]').click();
    await eventually(() => page.textContent('#banner')).toContain('Denied ui-big');
    expect(pageErrors).toEqual([]);
  });
});

describe('console: proposals', () => {
  it('shows the change denied egress calls for, with its evidence and diff; Accept writes the next version, audited', async () => {
    const curl = await exec(leaseId, "curl -s -o /dev/null -w '%{http_code}' http://b.console.test:8080/build");
    expect(curl.stdout).toBe('403');

    await go('proposals/gov');
    const change = page.locator('.change[data-kind="add_host"][data-host="b.console.test"]');
    await change.waitFor();
    expect(await change.locator('h4').textContent()).toContain('Allow host b.console.test on port 8080');
    const evidence = await change.locator('tbody tr').first().locator('td').allTextContents();
    // The call is known: curl sent the call's proxy credential.
    expect(evidence.slice(1)).toEqual([leaseId, curl.callId, 'GET b.console.test:8080']);
    const added = await page.locator('#proposal-diff .diff-line.added').allTextContents();
    // Each added line with its line number in the new version's text.
    expect(added.map((l) => l.replace(/^ *\d+/, ''))).toEqual(['+     - host: b.console.test\n', '+       ports:\n', '+         - 8080\n']);
    const numbers = added.map((l) => Number(/^ *(\d+)/.exec(l)![1]));
    expect(numbers).toEqual([numbers[0], numbers[0]! + 1, numbers[0]! + 2]);
    expect(await page.locator('#proposal-diff .diff-line.removed').count()).toBe(0);
    await ui.shot('proposals');

    await page.click('#accept-proposal');
    await eventually(() => page.textContent('#banner')).toContain('Wrote gov v2');
    const latest = (await api(h.apiKey, 'GET', '/v1/policies/gov')).body;
    expect(latest.version).toBe(2);
    expect(latest.policy.network.allow).toContainEqual({ host: 'b.console.test', ports: [8080] });
    await eventually(() => page.textContent('#proposal-summary')).toContain('Nothing to propose');
    const audit = (await api(h.apiKey, 'GET', '/v1/audit?action=policy.proposal_accept&target=policy:gov')).body.entries;
    expect(audit).toMatchObject([{ afterDigest: latest.digest, details: { version: 2 } }]);
    expect(pageErrors).toEqual([]);
  });

  it('a policy changed after the page loaded: Accept writes nothing, shows policy.version_conflict and the new proposal', async () => {
    // The lease runs v1, which does not allow c.console.test.
    expect((await exec(leaseId, "curl -s -o /dev/null -w '%{http_code}' http://c.console.test:8081/")).stdout).toBe('403');
    await go('proposals/gov');
    await page.locator('.change[data-host="c.console.test"]').waitFor();
    expect(await page.textContent('#accept-proposal')).toBe('Accept as version 3');

    const v2 = (await api(h.apiKey, 'GET', '/v1/policies/gov')).body.policy;
    const put = await api(h.apiKey, 'PUT', '/v1/policies/gov', { ...v2, version: 3, description: 'changed by another admin' });
    expect([put.status, put.body.version]).toEqual([200, 3]);

    await page.click('#accept-proposal');
    await eventually(() => page.textContent('#banner')).toContain('policy.version_conflict');
    await eventually(() => page.textContent('#accept-proposal')).toBe('Accept as version 4');
    expect(await page.locator('#proposal-policy option:checked').textContent()).toBe('gov v3');
    expect((await api(h.apiKey, 'GET', '/v1/policies/gov')).body.version).toBe(3);
    await ui.shot('proposals-conflict');
    expect(pageErrors).toEqual([]);
  });
});
