/**
 * The admin console end to end: the bundle built from console/ as `npm run build` builds it,
 * served by a real control plane (real Docker, real Redis), driven in headless Chromium
 * (Debian's `chromium`, through playwright-core). Each step does what an admin would — sign in,
 * release a sandbox, fix a policy, set a secret, read the egress and audit logs — and checks
 * both the page and the API. Screenshots of each page go to `SBX_CONSOLE_SCREENSHOTS` (default:
 * a fresh temporary directory, printed).
 */
import { randomBytes } from 'node:crypto';
import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lease, ToolResult } from '../contract/objects.js';
import { buildConsole, launchConsoleBrowser, startHarness, type ConsoleBrowser, type Harness, apiAs } from './fixtures/index.js';

let h: Harness;
let ui: ConsoleBrowser;
let page: Page;
let consoleDir: string;
/** Every URL the page asked for, and every script error or console error it had. */
const requested: string[] = [];
const pageErrors: string[] = [];
/** Bodies of the API answers the page received (to show a secret value never came back). */
const apiBodies: string[] = [];
/** `status path` of every error answer the page received. */
const failedAnswers: string[] = [];

const api = apiAs(() => h.url);

/** `expect.poll` with room for a loaded machine: the page's fetches and the sandbox work take their time. */
const eventually = <T>(read: () => Promise<T> | T) => expect.poll(read, { timeout: 20_000, interval: 100 });

/** Attribute `name` of every element `locator` matches, in order, read at one instant (rows are re-rendered under us). */
async function attributes(locator: Locator, name: string): Promise<Array<string | null>> {
  return locator.evaluateAll((elements, attribute) => elements.map((element) => element.getAttribute(attribute)), name);
}

/** Both storages of the page, as one JSON text. */
const STORAGE = 'JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage })';

const shot = (name: string): Promise<void> => ui.shot(name);

async function signIn(key: string): Promise<void> {
  await page.goto(`${h.url}/console/`);
  await page.fill('#api-key', key);
  await page.click('#login button[type=submit]');
}

beforeAll(async () => {
  // Built into a directory of this test's own, from the sources as they are now.
  consoleDir = await buildConsole();
  h = await startHarness({ SBX_CONSOLE_DIR: consoleDir });
  ui = await launchConsoleBrowser();
  page = ui.page;
  page.on('request', (request) => requested.push(request.url()));
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    // The browser logs every error answer too; those are checked apart, by URL, in failedAnswers.
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) pageErrors.push(message.text());
  });
  page.on('response', (response) => {
    if (response.status() >= 400)
      failedAnswers.push(`${response.status()} ${new URL(response.url()).pathname}${new URL(response.url()).search}`);
    if (new URL(response.url()).pathname.startsWith('/v1/'))
      void response.text().then(
        (text) => apiBodies.push(text),
        () => undefined,
      );
  });
}, 120_000);

afterAll(async () => {
  await ui?.close(consoleDir);
  await h?.close();
});

describe('admin console', () => {
  it('is served without a key, under a same-origin content security policy, while the API still wants one', async () => {
    const bare = await fetch(`${h.url}/console`, { redirect: 'manual' });
    expect(bare.status).toBe(301);
    expect(bare.headers.get('location')).toBe('/console/');
    const index = await fetch(`${h.url}/console/`);
    expect(index.status).toBe(200);
    expect(await index.text()).toContain('<script type="module" src="console.js">');
    expect(index.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(index.headers.get('content-security-policy')).toContain("connect-src 'self'");
    expect((await fetch(`${h.url}/console/console.js`)).status).toBe(200);
    expect((await fetch(`${h.url}/v1/policies`)).status).toBe(401);
  });

  it('refuses a user key with the API\'s "admin key required" and an unknown key as not accepted, keeping neither', async () => {
    const created = await api(h.apiKey, 'POST', '/v1/api-keys', { name: 'console user', role: 'user', tenant: 'team-a' });
    expect(created.status).toBe(201);
    await signIn(created.body.secret);
    await eventually(() => page.textContent('#login-error')).toContain('Admin key required');
    expect(await page.textContent('#login-error')).toContain('403 auth.admin_required');
    expect(await page.evaluate<string>(STORAGE)).toBe('{}{}');
    await shot('login-user-key');

    await page.fill('#api-key', 'sbx_not_a_key_at_all');
    await page.click('#login button[type=submit]');
    await eventually(() => page.textContent('#login-error')).toContain('401 auth.invalid_api_key');
    expect(await page.evaluate<string>(STORAGE)).toBe('{}{}');
  });

  let released: Lease;

  it('signs in with the admin key and lists a live sandbox with its state, policy and TTL; Release releases it', async () => {
    released = await h.client.createSandbox({ ttlSeconds: 900, labels: { job: 'console-e2e' } });
    await signIn(h.apiKey);
    const row = page.locator(`#sandboxes tr[data-id="${released.id}"]`);
    await row.waitFor();
    expect(await row.getAttribute('data-status')).toBe('ready');
    const cells = await row.locator('td').allTextContents();
    expect(cells[1]).toBe('default');
    expect(cells[2]).toBe('ready');
    expect(cells[3]).toBe('default v1');
    // 900 s leased a moment ago: between 13 and 15 minutes left.
    expect(cells[5]).toMatch(/^1[345]m \d\ds$/);
    expect(cells[6]).toBe('job=console-e2e');
    await shot('sandboxes');

    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('button[data-action=release]').click();
    await eventually(() => page.textContent('#banner')).toContain(`Released ${released.id}`);
    // Live sandboxes only by default: it leaves the list; with "Show ended" it is back as released.
    await row.waitFor({ state: 'detached' });
    expect((await h.client.getSandbox(released.id)).status).toBe('released');
    await page.check('#show-ended');
    expect(await row.getAttribute('data-status')).toBe('released');
    expect(await row.locator('button[data-action=release]').count()).toBe(0);
  });

  it('policy editor: an invalid value is marked at its field and line, nothing is stored; fixed, it becomes the next version', async () => {
    const base = await api(h.apiKey, 'GET', '/v1/policies/default');
    const { name: _n, version: _v, ...document } = base.body.policy;
    expect((await api(h.apiKey, 'PUT', '/v1/policies/console-test', { ...document, description: 'for the console test' })).status).toBe(
      201,
    );

    await page.goto(`${h.url}/console/#/policies/console-test`);
    const editor = page.locator('textarea.code-input');
    await eventually(() => editor.inputValue()).toContain('description: for the console test');
    const text = await editor.inputValue();
    expect(text).toMatch(/^ {2}cpus: 2$/m);
    const broken = text.replace(/^ {2}cpus: 2$/m, '  cpus: 999\n  gpus: 2');
    await editor.fill(broken);
    await page.click('#save-policy');

    const lines = broken.split('\n');
    const cpusLine = lines.findIndex((l) => l === '  cpus: 999') + 1;
    const gpusLine = lines.findIndex((l) => l === '  gpus: 2') + 1;
    const cpusIssue = page.locator('#policy-issues li[data-path="resources.cpus"]');
    await cpusIssue.waitFor();
    expect(await cpusIssue.getAttribute('data-line')).toBe(String(cpusLine));
    expect(await cpusIssue.textContent()).toMatch(/line \d+.*64/);
    expect(await page.locator('#policy-issues li[data-path="resources.gpus"]').getAttribute('data-line')).toBe(String(gpusLine));
    // The lines themselves are marked, with the message written beside the field.
    for (const line of [cpusLine, gpusLine]) {
      expect(await page.locator(`.code-line[data-line="${line}"]`).getAttribute('class')).toContain('has-issue');
      expect(
        await page
          .locator('.code-gutter .gutter-line')
          .nth(line - 1)
          .getAttribute('class'),
      ).toContain('has-issue');
    }
    expect(await page.locator(`.code-line[data-line="${cpusLine}"] .inline-issue`).textContent()).toContain('64');
    expect(await page.locator(`.code-line[data-line="${gpusLine}"] .inline-issue`).textContent()).toContain('unknown field');
    expect(await page.locator('.code-line.has-issue').count()).toBe(2);
    expect(await page.textContent('.editor-status')).toContain('policy.invalid');
    // The editor scrolled to the first marked line (the text was filled in, leaving it at the end).
    const [scrollTop, height] = await editor.evaluate((textarea) => [textarea.scrollTop, textarea.clientHeight]);
    expect(scrollTop).toBeLessThanOrEqual((cpusLine - 1) * 20);
    expect(scrollTop + height).toBeGreaterThanOrEqual(gpusLine * 20);
    await shot('policy-invalid');
    expect((await api(h.apiKey, 'GET', '/v1/policies/console-test')).body.version).toBe(1);

    await editor.fill(broken.replace('  cpus: 999\n  gpus: 2', '  cpus: 4'));
    await page.click('#save-policy');
    await eventually(() => page.textContent('.editor-status')).toBe('Saved version 2.');
    expect(await page.locator('.code-line.has-issue').count()).toBe(0);
    expect(await page.locator('#policy-history tr[data-version="2"]').textContent()).toContain('latest');
    expect(await page.locator('#policy-history tbody tr').count()).toBe(2);
    const current = await api(h.apiKey, 'GET', '/v1/policies/console-test');
    expect(current.body.version).toBe(2);
    expect(current.body.policy.resources.cpus).toBe(4);
    expect(current.body.createdBy).toBe('bootstrap');
    await shot('policy-saved');
  });

  it('secrets: a value is set and its metadata listed, and the value never appears on the page, in storage or in an answer', async () => {
    const value = `console-secret-${randomBytes(12).toString('hex')}`;
    await page.goto(`${h.url}/console/#/secrets`);
    await page.fill('#secret-name', 'CONSOLE_TOKEN');
    await page.fill('#secret-value', value);
    await page.click('#secret-form button[type=submit]');
    const row = page.locator('#secrets tr[data-name="CONSOLE_TOKEN"]');
    await row.waitFor();
    const cells = await row.locator('td').allTextContents();
    expect(cells.slice(0, 3)).toEqual(['CONSOLE_TOKEN', 'v1', `${value.length} B`]);
    expect(await page.textContent('#banner')).toContain('Stored CONSOLE_TOKEN version 1');
    expect(await page.inputValue('#secret-value')).toBe('');
    await shot('secrets');

    expect(await page.content()).not.toContain(value);
    for (const field of await page.locator('input, textarea').all()) expect(await field.inputValue()).not.toContain(value);
    expect(await page.evaluate<string>(STORAGE)).not.toContain(value);
    expect(apiBodies.length).toBeGreaterThan(0);
    for (const body of apiBodies) expect(body).not.toContain(value);
    expect((await h.client.getSecret('CONSOLE_TOKEN')).sizeBytes).toBe(value.length);
  });

  it("egress: an allowlist sandbox's connections, filtered by decision and host substring; a sandbox without any shows the empty state", async () => {
    const lease = await h.client.createSandbox({ policy: 'egress-allowlist' });
    for (const url of ['http://blocked.example/', 'http://other.invalid:8080/']) {
      const result = (await h.client.submitCall(
        lease.id,
        'exec',
        { cmd: `curl -sS -o /dev/null -w '%{http_code}' ${url}`, timeoutMs: 30_000 },
        { waitSeconds: 60 },
      )) as ToolResult;
      expect(result.modelText).toContain('403');
    }
    await page.goto(`${h.url}/console/#/egress/${lease.id}`);
    const rows = page.locator('#egress tbody tr');
    await eventually(() => rows.count()).toBe(2);
    expect(await attributes(rows, 'data-decision')).toEqual(['denied', 'denied']);

    await page.fill('#egress-host', 'BLOCKED');
    await page.press('#egress-host', 'Enter');
    await eventually(() => rows.count()).toBe(1);
    expect(await rows.first().getAttribute('data-host')).toBe('blocked.example');
    expect(await rows.first().textContent()).toContain('blocked.example:80');
    await shot('egress');

    await page.selectOption('#egress-decision', 'allowed');
    await eventually(() => rows.count()).toBe(0);
    expect(await page.textContent('section p.empty')).toBe('No connections match these filters.');

    await page.goto(`${h.url}/console/#/egress/${released.id}`);
    await eventually(() => page.textContent('section p.empty')).toContain('No connections recorded');
    expect(await page.inputValue('#egress-sandbox')).toBe(released.id);
  });

  it('audit: what the console did is in the log, newest first, filtered by action and paged with Older/Newer', async () => {
    await page.goto(`${h.url}/console/#/audit`);
    const rows = page.locator('#audit tbody tr');
    await rows.first().waitFor();
    const actions = await rows.evaluateAll((trs) => trs.map((tr) => `${tr.getAttribute('data-action')} ${tr.children[2]?.textContent}`));
    expect(actions).toEqual(
      expect.arrayContaining(['secret.put secret:CONSOLE_TOKEN', 'policy.put policy:console-test', `lease.release lease:${released.id}`]),
    );
    // Newest first: the secret was set after the policy was saved.
    expect(actions.indexOf('secret.put secret:CONSOLE_TOKEN')).toBeLessThan(actions.indexOf('policy.put policy:console-test'));
    await shot('audit');

    await page.fill('#audit-action', 'policy.put');
    await page.press('#audit-action', 'Enter');
    await eventually(async () => [...new Set(await attributes(rows, 'data-action'))]).toEqual(['policy.put']);
    expect(await rows.count()).toBe(2);

    await page.fill('#audit-action', '');
    await page.selectOption('#audit-limit', '10');
    await eventually(() => rows.count()).toBe(10);
    const first = await attributes(rows, 'data-id');
    expect(await page.isDisabled('#audit-newer')).toBe(true);
    await page.click('#audit-older');
    await eventually(() => page.textContent('#audit-page')).toBe('Page 2');
    const second = await attributes(rows, 'data-id');
    expect(second.length).toBeGreaterThan(0);
    expect(second.filter((id) => first.includes(id))).toEqual([]);
    // Stream ids grow with time: every entry of page 2 is older than every entry of page 1.
    const ms = (id: string | null): number => Number(id?.split('-')[0]);
    expect(Math.max(...second.map(ms))).toBeLessThanOrEqual(Math.min(...first.map(ms)));
    await page.click('#audit-newer');
    await eventually(() => page.textContent('#audit-page')).toBe('Page 1');
    expect(await attributes(rows, 'data-id')).toEqual(first);
  });

  it('loaded nothing from anywhere but the control plane and had no script errors', () => {
    const origin = new URL(h.url).origin;
    expect(requested.length).toBeGreaterThan(0);
    expect(requested.filter((url) => new URL(url).origin !== origin)).toEqual([]);
    expect(pageErrors).toEqual([]);
    // The only error answers: the refused sign-ins and the invalid policy.
    expect(failedAnswers).toEqual(['403 /v1/policies', '401 /v1/policies', '400 /v1/policies/console-test']);
  });
});
