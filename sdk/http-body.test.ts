/**
 * Bulk-byte requests over node:http (http-body.ts) against local servers that misbehave as a
 * proxy might: an answer before the body is read, a status with no body.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { sendWithBody } from './http-body.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise((r) => server?.close(r) ?? r(undefined));
  server = undefined;
});

/** A server answering every request with `status` at once, before reading its body; the sockets it accepted. */
async function answering(status: number): Promise<{ url: string; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  server = createServer((_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(status === 205 ? undefined : '{"error":{"code":"files.invalid_archive"}}');
  });
  server.on('connection', (socket) => sockets.push(socket));
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/up`, sockets };
}

describe('sendWithBody', () => {
  it('an answer before a streamed body ends resolves, and the connection goes (kept, it would hold the process until the server gave up)', async () => {
    const { url, sockets } = await answering(400);
    // A body that never ends by itself.
    const body = new Readable({ read() {} });
    body.push(Buffer.alloc(64 * 1024));
    const response = await sendWithBody(url, 'PUT', {}, body);
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({ error: { code: 'files.invalid_archive' } });
    expect(body.destroyed).toBe(true);
    await Promise.all(sockets.map((s) => (s.closed ? undefined : new Promise((r) => s.once('close', r)))));
    expect(sockets.every((s) => s.closed)).toBe(true);
  });

  it('a status that has no body (205) resolves with an empty body rather than throwing outside the caller', async () => {
    const { url } = await answering(205);
    const response = await sendWithBody(url, 'PUT', {}, Buffer.from('x'));
    expect(response.status).toBe(205);
    expect(await response.text()).toBe('');
  });
});
