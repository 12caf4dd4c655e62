/**
 * servePreview when the agent's pooled connection closes before it answers (an agent that
 * restarted): a GET goes again on a connection asked for and is answered; a POST with a body
 * fails as unreachable (it is not sent twice). The control plane's parts are real (tunnels,
 * proxy, service, an HTTP server); the agent is a peer that speaks the tunnel contract
 * (contract/previews.ts) and closes every pooled connection it is assigned, which is the race
 * that a real agent only meets when it dies at that moment. And a refusal does not wait for
 * the preview log.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import type { PreviewOpen } from '../../contract/previews.js';
import { useScratchDirs } from '../../test/fixtures/scratch.js';
import type { LeaseRecord } from '../leases/store.js';
import { servePreview } from './serve.js';
import { PreviewService } from './service.js';
import { AgentTunnels } from '../agent-link/tunnels.js';

/** Temporary directories of this file, removed after its tests. */
const scratch = useScratchDirs();
const PORT = 8000;
const PREFIX = `/v1/sandboxes/sbx_test/ports/${PORT}`;
let dir: string;
let server: http.Server;
let tunnels: AgentTunnels;
let base: string;
/** Request lines the agent received on a pooled connection it then closed unanswered. */
const dropped: string[] = [];
/** Sockets the agent opened, closed after the file. */
const agentSockets = new Set<net.Socket>();

/** The agent's side: each signalled open is answered and served; it keeps one idle pooled connection, which dies when assigned. */
function agentOpen(open: PreviewOpen): void {
  const answered = net.connect(join(dir, open.socket));
  agentSockets.add(answered);
  answered.write(`${JSON.stringify({ id: open.connId, ok: true })}\n`);
  let head = '';
  answered.on('data', (chunk: Buffer) => {
    head += chunk.toString('latin1');
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
    if (head.length < end + 4 + length) return;
    answered.end(`HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nserved`);
  });
  const pooled = net.connect(join(dir, open.socket));
  agentSockets.add(pooled);
  pooled.write(`${JSON.stringify({ pool: open.poolKey, early: true })}\n`);
  pooled.once('data', (chunk: Buffer) => {
    // The assignment line, then the client's early data: its request line is what was dropped.
    const text = chunk.toString('latin1');
    dropped.push(text.slice(text.indexOf('\n') + 1).split('\r\n')[0]!);
    pooled.destroy();
  });
}

beforeAll(async () => {
  dir = await scratch('sbx-serve-test-');
  tunnels = new AgentTunnels({
    processId: '0123456789abcdef',
    dirOf: () => dir,
    signal: async (_leaseId, message) => {
      if (message.type === 'preview_open') agentOpen(message);
    },
    log: { warn: () => undefined },
    dialTimeoutMs: 5000,
  });
  const previews = new PreviewService({
    tunnels,
    // A log that never finishes a write: nothing the client gets may wait for it.
    log: { append: () => new Promise<void>(() => undefined), read: async () => ({ events: [], dropped: 0 }) },
    leases: { visible: async () => Promise.reject(new Error('unused')), usable: (lease) => lease },
    key: randomBytes(32),
    domain: null,
    now: () => new Date(),
    warn: () => undefined,
  });
  const lease = { id: 'sbx_test', policy: { name: 'p' }, policySnapshot: { ports: { allowed: [PORT] } } } as unknown as LeaseRecord;
  server = http.createServer((req, res) => {
    const port = Number(/^\/port-(\d+)\//.exec(req.url!.slice(PREFIX.length))?.[1] ?? PORT);
    const target = { lease, port, via: 'api' as const, keyId: 'k', tenant: 't', prefixSegments: 5, prefix: PREFIX, rawUrl: req.url! };
    servePreview(previews, { req, res, protocol: 'http', hijack: () => undefined }, target).catch((err: unknown) => {
      res.writeHead(err instanceof AppError ? err.status : 500).end(err instanceof AppError ? err.code : String(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}${PREFIX}`;
});

afterAll(async () => {
  for (const s of agentSockets) s.destroy();
  await tunnels?.close();
  if (server) await new Promise((resolve) => server.close(resolve));
});

/** Sends requests `make(i)` until one was sent on a pooled connection that closed unanswered; returns its answer. */
async function untilDropped(make: (i: number) => Promise<Response>, requestLine: (i: number) => string): Promise<Response> {
  for (let i = 0; i < 50; i += 1) {
    const before = dropped.length;
    const answer = await make(i);
    if (dropped.slice(before).includes(requestLine(i))) return answer;
    expect(answer.status, `request ${i}, on a connection asked for`).toBe(200);
  }
  throw new Error('no request went out on a pooled connection in 50 tries');
}

describe('servePreview, the log', () => {
  it('a refusal is answered without waiting for its log entry to be written', async () => {
    const answer = await fetch(`${base}/port-8001/x`);
    expect(answer.status).toBe(403);
    expect(await answer.text()).toBe('preview.port_denied');
  });
});

describe('servePreview, a pooled connection closed before the agent answered', () => {
  it('a GET goes again on a connection asked for and is answered', async () => {
    const answer = await untilDropped(
      (i) => fetch(`${base}/get-${i}`),
      (i) => `GET /get-${i} HTTP/1.1`,
    );
    expect(answer.status).toBe(200);
    expect(await answer.text()).toBe('served');
  });

  it('a POST with a body is not sent twice: it fails as unreachable', async () => {
    const answer = await untilDropped(
      (i) => fetch(`${base}/post-${i}`, { method: 'POST', body: 'payload' }),
      (i) => `POST /post-${i} HTTP/1.1`,
    );
    expect(answer.status).toBe(504);
    expect(await answer.text()).toBe('preview.agent_unreachable');
  });
});
