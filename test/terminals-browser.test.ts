/**
 * A terminal attached from a real browser (Debian's `chromium`, through playwright-core): a
 * browser's WebSocket cannot send `Authorization`, so it opens the signed URL of `POST
 * .../terminals/:terminalId/url` — short-lived, for one terminal, no API key in it. An expired
 * URL, a token of another terminal and a tampered one are refused before the upgrade (401).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Browser } from 'playwright-core';
import { launchChromium } from './fixtures/console.js';
import { apiAs, useLeasedSandbox } from './fixtures/index.js';

const sb = useLeasedSandbox();
const api = apiAs(() => sb.h.url);
const call = (method: string, path: string, body?: unknown) => api(sb.h.apiKey, method, `/v1/sandboxes/${sb.leaseId}${path}`, body);

let browser: Browser;
/** The page's own WebSocket (a bare `WebSocket` in page code would name the `ws` import). */
type BrowserGlobals = { WebSocket: new (url: string) => globalThis.WebSocket };
const opened: string[] = [];

beforeAll(async () => {
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  for (const id of opened) await call('DELETE', `/terminals/${id}`);
});

async function createTerminal(): Promise<string> {
  const r = await call('POST', '/terminals', { cols: 80, rows: 24 });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  opened.push(r.body.terminalId);
  return r.body.terminalId as string;
}

async function mint(terminalId: string, expiresInSeconds?: number): Promise<{ url: string; path: string; expiresAt: string }> {
  const r = await call('POST', `/terminals/${terminalId}/url`, expiresInSeconds === undefined ? {} : { expiresInSeconds });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

/**
 * The HTTP answer to a WebSocket upgrade of `url` (101 when it opened), with the error code of a
 * refusal, once the server has closed a refused connection (it must: nothing reads it any more).
 */
function handshake(url: string): Promise<{ status: number; code: string | null }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url);
    socket.once('open', () => {
      socket.close();
      resolve({ status: 101, code: null });
    });
    socket.once('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (d: Buffer) => (text += d.toString('utf8')));
      response.socket.once('close', () =>
        resolve({ status: response.statusCode ?? 0, code: (JSON.parse(text) as { error: { code: string } }).error.code }),
      );
    });
    socket.once('error', (err) => reject(err));
  });
}

describe('a terminal from a browser', () => {
  it('Chromium opens the signed URL, types `echo hi` and sees the output; the URL holds no API key', async () => {
    const terminalId = await createTerminal();
    const { url, expiresAt } = await mint(terminalId, 120);
    expect(url).toMatch(new RegExp(`^ws://[^/]+/v1/terminal-ws/${sb.leaseId}/${terminalId}/[A-Za-z0-9._-]+$`));
    expect(url).not.toContain(sb.h.apiKey);
    expect(Date.parse(expiresAt) - Date.now()).toBeLessThanOrEqual(120_000);
    const page = await browser.newPage();
    try {
      await page.evaluate((target) => {
        const w = globalThis as unknown as { out: string; opened: boolean; failed: boolean };
        w.out = '';
        w.opened = false;
        w.failed = false;
        const socket = new (globalThis as unknown as BrowserGlobals).WebSocket(target);
        socket.binaryType = 'arraybuffer';
        const decoder = new TextDecoder();
        socket.onopen = () => {
          w.opened = true;
          socket.send(new TextEncoder().encode('echo hi\r'));
        };
        socket.onmessage = (event) => {
          if (typeof event.data !== 'string') w.out += decoder.decode(event.data as ArrayBuffer, { stream: true });
        };
        socket.onerror = () => (w.failed = true);
      }, url);
      // The shell's own line `hi` (the typed `echo hi` is echoed too, after the prompt; bash may end
      // bracketed paste with `ESC [?2004l CR` just before it).
      await page
        .waitForFunction(() => /(^|[\r\n])hi\r\n/.test((globalThis as unknown as { out: string }).out), undefined, { timeout: 30_000 })
        .catch(async (err: Error) => {
          throw new Error(
            `${err.message}; page state: ${JSON.stringify(
              await page.evaluate(() => {
                const w = globalThis as unknown as { out: string; opened: boolean; failed: boolean };
                return { out: w.out, opened: w.opened, failed: w.failed };
              }),
            )}`,
          );
        });
      expect(await page.evaluate(() => (globalThis as unknown as { failed: boolean }).failed)).toBe(false);
    } finally {
      await page.close();
    }
  });

  it('an expired URL is 401 terminal.url_expired; a token of another terminal, or tampered, 401 terminal.url_invalid; the browser cannot open them', async () => {
    const [a, b] = [await createTerminal(), await createTerminal()];
    const forA = await mint(a, 120);
    const base = forA.url.slice(0, forA.url.indexOf('/v1/'));
    const tokenOfA = forA.path.split('/').at(-1)!;
    expect(await handshake(forA.url)).toEqual({ status: 101, code: null });
    expect(await handshake(`${base}/v1/terminal-ws/${sb.leaseId}/${b}/${tokenOfA}`)).toEqual({ status: 401, code: 'terminal.url_invalid' });
    const flipped = `${tokenOfA.slice(0, -1)}${tokenOfA.endsWith('A') ? 'B' : 'A'}`;
    expect(await handshake(`${base}/v1/terminal-ws/${sb.leaseId}/${a}/${flipped}`)).toEqual({ status: 401, code: 'terminal.url_invalid' });
    const short = await mint(b, 1);
    await expect.poll(async () => handshake(short.url), { timeout: 10_000 }).toEqual({ status: 401, code: 'terminal.url_expired' });
    // The browser fails to open it (no upgrade), and the API key route still needs its header.
    const page = await browser.newPage();
    try {
      const outcome = await page.evaluate(
        (target) =>
          new Promise<string>((resolve) => {
            const socket = new (globalThis as unknown as BrowserGlobals).WebSocket(target);
            socket.onopen = () => resolve('opened');
            socket.onclose = () => resolve('closed');
          }),
        short.url,
      );
      expect(outcome).toBe('closed');
    } finally {
      await page.close();
    }
    const keyRoute = await handshake(`${base}/v1/sandboxes/${sb.leaseId}/terminals/${a}/ws`).catch((err: Error) => err);
    expect(keyRoute).toEqual({ status: 401, code: 'auth.missing_api_key' });
    // A deleted terminal's URL opens nothing.
    await call('DELETE', `/terminals/${a}`);
    await expect.poll(async () => (await handshake(forA.url)).status, { timeout: 20_000 }).toBe(409);
  });

  it('a URL for a missing terminal is 404; expiresInSeconds out of range is 400', async () => {
    const missing = await call('POST', '/terminals/call_nope/url', {});
    expect([missing.status, missing.body.error.code]).toEqual([404, 'terminal.not_found']);
    const terminalId = await createTerminal();
    for (const expiresInSeconds of [0, 24 * 3600 + 1, 1.5])
      expect((await call('POST', `/terminals/${terminalId}/url`, { expiresInSeconds })).status).toBe(400);
  });
});
