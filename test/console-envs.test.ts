/**
 * The console's images, snapshots and volumes pages end to end, in headless Chromium (Debian's
 * `chromium` through playwright-core) against a real control plane: each page lists what the API
 * made (an image built through `POST /v1/images` FROM this checkout's sandbox image, a snapshot of
 * a leased sandbox, a volume), one action is clicked per page, and its effect is read back through
 * the API. Everything made is removed in afterAll, also when a test failed.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoopVolumeDisks } from '../control-plane/runtime/volume-disks.js';
import {
  REPO_ROOT,
  apiAs,
  buildConsole,
  docker,
  launchConsoleBrowser,
  openConsole,
  startHarness,
  testRunId,
  type ConsoleBrowser,
  type Harness,
} from './fixtures/index.js';

const MiB = 1024 * 1024;
const runId = testRunId();

let h: Harness;
let ui: ConsoleBrowser;
let page: Page;
let consoleDir: string;
let scratch: string;
/** Script errors of the page, and every request it made to somewhere other than the control plane. */
const pageErrors: string[] = [];
const elsewhere: string[] = [];
/** Snapshots made here (ids): their images are removed whatever the API says. */
const snapshotIds = new Set<string>();
const volumeNames = new Set<string>();

const api = apiAs(() => h.url);
const eventually = <T>(read: () => Promise<T> | T) => expect.poll(read, { timeout: 30_000, interval: 100 });

const shot = (name: string): Promise<void> => ui.shot(name);

const go = (hash: string): Promise<void> => openConsole(page, h.url, h.apiKey, hash);

beforeAll(async () => {
  consoleDir = await buildConsole();
  scratch = await mkdtemp(join(tmpdir(), 'sbx-console-envs-'));
  h = await startHarness({ SBX_CONSOLE_DIR: consoleDir });
  ui = await launchConsoleBrowser();
  page = ui.page;
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('request', (request) => {
    if (!request.url().startsWith(h.url)) elsewhere.push(request.url());
  });
  // Nothing leaves for the network: every request to another origin is refused before it is sent.
  await page.route(
    (url) => !url.href.startsWith(h.url),
    (route) => route.abort(),
  );
}, 120_000);

afterAll(async () => {
  await ui?.close(consoleDir);
  if (!h) return;
  for (const lease of await h.client.listSandboxes().catch(() => [])) await h.client.releaseSandbox(lease.id).catch(() => undefined);
  for (const s of await h.client.listSnapshots().catch(() => [])) {
    snapshotIds.add(s.id);
    await h.client.deleteSnapshot(s.id).catch(() => undefined);
  }
  for (const image of await h.client.listImages().catch(() => [])) await h.client.deleteImage(image.id).catch(() => undefined);
  for (const name of volumeNames) await api(h.apiKey, 'DELETE', `/v1/volumes/${name}`).catch(() => undefined);
  // Whatever the API left: this installation's volume disks, images built or committed for this owner.
  const diskRoot = `${h.config.dataDir}/volumes/${h.plane.ownership.installation}`;
  for (const entry of await readdir(diskRoot).catch(() => []))
    await new LoopVolumeDisks(diskRoot).destroy(entry.replace(/\.img$/, '')).catch(() => undefined);
  await rm(diskRoot, { recursive: true, force: true });
  const built = (await docker('images', '--filter', `label=sbx.owner=${h.config.owner}`, '--format', '{{.ID}}').catch(() => ''))
    .split('\n')
    .filter(Boolean);
  if (built.length > 0) await docker('rmi', '-f', ...new Set(built)).catch(() => undefined);
  for (const id of snapshotIds) {
    const images = (await docker('images', '-q', '--filter', `label=sbx.snapshot.id=${id}`).catch(() => '')).split('\n').filter(Boolean);
    if (images.length > 0) await docker('rmi', '-f', ...images).catch(() => undefined);
  }
  await h.close();
  await rm(scratch, { recursive: true, force: true });
}, 120_000);

describe('console: images, snapshots, volumes', () => {
  it('images: lists a built image with status, name, id and size; shows its build log; Delete shows 409 image.in_use while a sandbox runs from it, then removes it', async () => {
    const dir = await mkdtemp(join(scratch, 'ctx-'));
    const base = (await readFile(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8')).trim();
    await writeFile(join(dir, 'Dockerfile'), `FROM ${base}\nRUN echo console-build-${runId} > /opt/console.txt\n`);
    const { image } = await h.client.buildImage(dir, { name: `console/${runId}:1` });
    await eventually(async () => (await h.client.getImage(image.id)).status).toBe('ready');

    await go('images');
    const row = page.locator(`#images tr[data-id="${image.id}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allTextContents();
    expect(cells.slice(0, 3)).toEqual(['ready', `console/${runId}:1`, image.id]);
    expect(cells[3]).toMatch(/\d/);

    await row.locator('button[data-action=log]').click();
    await eventually(() => page.textContent('#image-log')).toContain(`console-build-${runId}`);
    expect(await page.textContent('#image-log')).toContain('[succeeded]');
    await shot('images');

    // While a sandbox runs from it, Delete is refused and the code is shown; released, it goes.
    const user = await h.client.createSandbox({ image: image.id, ttlSeconds: 600 });
    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('button[data-action=delete]').click();
    await eventually(() => page.textContent('#banner')).toContain('image.in_use');
    expect((await h.client.getImage(image.id)).status).toBe('ready');
    await h.client.releaseSandbox(user.id);
    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('button[data-action=delete]').click();
    await eventually(() => page.textContent('#banner')).toContain(`Deleted ${image.id}`);
    await row.waitFor({ state: 'detached' });
    await expect(h.client.getImage(image.id)).rejects.toMatchObject({ status: 404 });
  });

  it('snapshots: lists a snapshot of a leased sandbox; Fork 1 starts one sandbox whose id is shown; Delete while it runs shows 409 snapshot.in_use', async () => {
    const parent = await h.client.createSandbox({ ttlSeconds: 600 });
    const snap = await h.client.snapshotSandbox(parent.id);
    snapshotIds.add(snap.id);

    await go('snapshots');
    const row = page.locator(`#snapshots tr[data-id="${snap.id}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allTextContents();
    expect(cells[0]).toBe(snap.id);
    expect(cells[1]).toBe(parent.id);

    await row.locator('input.count').fill('1');
    await row.locator('button[data-action=fork]').click();
    const forked = page.locator('#fork-result li');
    await forked.first().waitFor();
    expect(await forked.count()).toBe(1);
    const forkId = await forked.first().getAttribute('data-id');
    const lease = await h.client.getSandbox(forkId!);
    expect(lease.status).toBe('ready');
    expect(await page.textContent('#banner')).toContain(`Forked ${snap.id} into 1 sandbox`);
    await shot('snapshots');

    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('button[data-action=delete]').click();
    await eventually(() => page.textContent('#banner')).toContain('snapshot.in_use');
    expect((await h.client.getSnapshot(snap.id)).id).toBe(snap.id);
  });

  it('volumes: lists a volume with size and its mounts; Create makes one; Delete of a mounted one shows 409 volume.in_use, of a free one removes it', async () => {
    const mounted = `console-m-${runId}`.toLowerCase().slice(0, 60);
    const free = `console-f-${runId}`.toLowerCase().slice(0, 60);
    volumeNames.add(mounted).add(free);
    expect((await api(h.apiKey, 'POST', '/v1/volumes', { name: mounted, sizeBytes: 32 * MiB })).status).toBe(201);
    const user = await h.client.createSandbox({ volumes: [{ name: mounted, path: '/mnt/data' }] });

    await go('volumes');
    const row = page.locator(`#volumes tr[data-name="${mounted}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allTextContents();
    expect(cells[0]).toBe(mounted);
    expect(cells[1]).toContain('32');
    expect(cells[4]).toContain(user.id);
    expect(await page.textContent('#volumes-used')).toContain('used of');

    await page.fill('#volume-name', free);
    await page.fill('#volume-size', '16');
    await page.click('#volume-form button[type=submit]');
    await eventually(() => page.textContent('#banner')).toContain(`Created ${free}`);
    const freeRow = page.locator(`#volumes tr[data-name="${free}"]`);
    await freeRow.waitFor();
    expect((await api(h.apiKey, 'GET', `/v1/volumes/${free}`)).body.sizeBytes).toBe(16 * MiB);
    await shot('volumes');

    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('button[data-action=delete]').click();
    await eventually(() => page.textContent('#banner')).toContain('volume.in_use');
    expect((await api(h.apiKey, 'GET', `/v1/volumes/${mounted}`)).status).toBe(200);

    page.once('dialog', (dialog) => void dialog.accept());
    await freeRow.locator('button[data-action=delete]').click();
    await eventually(() => page.textContent('#banner')).toContain(`Deleted ${free}`);
    await freeRow.waitFor({ state: 'detached' });
    expect((await api(h.apiKey, 'GET', `/v1/volumes/${free}`)).status).toBe(404);
  });

  it('sandboxes: Pause pauses a ready sandbox and Resume resumes it', async () => {
    const lease = await h.client.createSandbox({ ttlSeconds: 600 });
    await go('sandboxes');
    const row = page.locator(`#sandboxes tr[data-id="${lease.id}"]`);
    await row.waitFor();
    await row.locator('button[data-action=pause]').click();
    await eventually(async () => (await h.client.getSandbox(lease.id)).status).toBe('paused');
    await row.locator('button[data-action=resume]').click();
    await eventually(async () => (await h.client.getSandbox(lease.id)).status).toBe('ready');
  });

  it('the page had no script error and asked nothing of another origin', () => {
    expect(pageErrors).toEqual([]);
    expect(elsewhere).toEqual([]);
  });
});
