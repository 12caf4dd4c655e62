/**
 * Splices one client request into a preview tunnel (tunnel.ts): plain HTTP through Node's HTTP
 * client over the tunnel socket (one tunnel per request, no keep-alive to the server: the server
 * in the sandbox sees one TCP connection per request), and upgrades (WebSocket or any `Upgrade`) as raw bytes
 * both ways once the request head is written, so subprotocols and extensions pass untouched.
 *
 * What the server in the sandbox receives: the method, the path after the preview prefix
 * (paths.ts) and the client's headers, except hop-by-hop ones, `Authorization` (the caller's
 * API key never reaches the sandbox) and sbx's preview cookie; `Host` is `localhost:<port>`
 * (dev servers that check Host, like Vite's, accept it), the original in `X-Forwarded-Host`,
 * with `X-Forwarded-Proto` and `X-Forwarded-Prefix` (the path prefix the app is served under).
 * What the client receives under a path prefix: the server's `Location` and `Set-Cookie` `Path`
 * moved under it (rewrite.ts).
 */
import http from 'node:http';
import { Duplex } from 'node:stream';
import { AppError } from '../../contract/errors.js';
import { rewriteResponseHeaders } from './rewrite.js';
import type { EarlyTunnel, Tunnel } from '../agent-link/tunnels.js';

/** How long one side of an upgraded connection may stay open after the other closed cleanly, ms. */
const LINGER_MS = 30_000;

/** The cookie a signed preview URL sets on a preview host (host-based routing). */
export const PREVIEW_COOKIE = 'sbx_preview_token';

/** Headers of one hop (RFC 9110 §7.6.1), never forwarded as such. */
const HOP_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** How a spliced request went: the server's status, the bytes each way, and whether it ran to its end. */
export interface Spliced {
  status: number | null;
  outcome: 'completed' | 'aborted';
  bytesToSandbox: number;
  bytesFromSandbox: number;
  error: string | null;
}

/** Where the request came from, for the forwarded headers. */
export interface Forwarding {
  port: number;
  /** Path prefix the app is served under (`/v1/sandboxes/<id>/ports/<port>`, or `''` on a preview host). */
  prefix: string;
  protocol: string;
}

/** The client's headers as the server in the sandbox receives them (raw pairs, order kept). */
export function forwardedHeaders(raw: readonly string[], fwd: Forwarding, upgrade: boolean): string[] {
  const out: string[] = [];
  let host = '';
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    let value = raw[i + 1]!;
    if (lower === 'host') {
      host = value;
      continue;
    }
    if (lower === 'authorization' || lower.startsWith('x-forwarded-')) continue;
    if (HOP_HEADERS.has(lower) && !(upgrade && (lower === 'connection' || lower === 'upgrade'))) continue;
    if (lower === 'cookie') {
      value = value
        .split(';')
        .map((c) => c.trim())
        .filter((c) => c !== '' && !c.startsWith(`${PREVIEW_COOKIE}=`))
        .join('; ');
      if (value === '') continue;
    }
    out.push(name, value);
  }
  out.push('Host', `localhost:${fwd.port}`);
  if (host) out.push('X-Forwarded-Host', host);
  out.push('X-Forwarded-Proto', fwd.protocol);
  if (fwd.prefix) out.push('X-Forwarded-Prefix', fwd.prefix);
  return out;
}

/**
 * Sends `req` (its body streamed) as `target` over the tunnel and, once the server's response
 * head arrives, writes it to `res` and streams the body. Resolves when the exchange ends.
 * On an early tunnel (AgentTunnels.openEarly) the request goes out before the agent answered,
 * and the tunnel's own errors are thrown as they are (`preview.port_closed`...). A client that
 * left (before or during the exchange) ends it as `aborted`, nothing thrown. Throws AppError
 * `preview.upstream_failed` (before anything was written to `res`) when the server closes
 * without a response head; `beforeHead` runs before the head is written (the route hijacks the
 * reply there).
 */
export async function spliceHttp(
  tunnel: Tunnel | EarlyTunnel,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  target: string,
  fwd: Forwarding,
  beforeHead: () => void,
): Promise<Spliced> {
  const { socket } = tunnel;
  const early = 'answered' in tunnel ? tunnel : null;
  let lines: Pick<Tunnel, 'headerBytes' | 'headerBytesWritten'> =
    early === null ? (tunnel as Tunnel) : { headerBytes: 0, headerBytesWritten: 0 };
  const counts = (): Pick<Spliced, 'bytesToSandbox' | 'bytesFromSandbox'> => ({
    bytesToSandbox: socket.bytesWritten - lines.headerBytesWritten,
    bytesFromSandbox: Math.max(0, socket.bytesRead - lines.headerBytes),
  });
  const headers = forwardedHeaders(req.rawHeaders, fwd, false);
  const connection = early === null ? socket : pipelined(early);
  const upstream = http.request({ method: req.method, path: target, headers, createConnection: () => connection, setHost: false });
  // The client going away ends the exchange with the server too (also when it left before the
  // exchange began: its 'close' has been and gone then).
  let clientLeft = false;
  const clientGone = (): void => {
    clientLeft = true;
    upstream.destroy();
    socket.destroy();
  };
  res.once('close', clientGone);
  if (req.socket.destroyed) clientGone();
  let answer: http.IncomingMessage;
  try {
    answer = await new Promise<http.IncomingMessage>((resolve, reject) => {
      // The tunnel was handed over paused: read once the client's parser listens on it.
      if (early === null) upstream.once('socket', () => socket.resume());
      upstream.once('response', resolve);
      // The agent's word on the port comes first: a refused port cuts the request short too.
      upstream.once('error', (err) => (early === null ? reject(err) : early.answered.then(() => reject(err), reject)));
      early?.answered.then((answered) => (lines = answered), reject);
      req.once('error', reject);
      if (hasBody(req)) req.pipe(upstream);
      else upstream.end();
      // An early tunnel's assignment waits corked (tunnel.ts openEarly): it leaves with the request head, in one write.
      if (early !== null) process.nextTick(() => socket.uncork());
    });
  } catch (err) {
    res.off('close', clientGone);
    upstream.destroy();
    socket.destroy();
    // Nobody to answer: the exchange ends as the client's doing, whatever it cut short.
    if (clientLeft) return { status: null, outcome: 'aborted', ...counts(), error: 'the client closed the connection' };
    if (err instanceof AppError) throw err;
    throw new AppError('preview.upstream_failed', `the server in the sandbox closed the connection without an answer: ${errText(err)}`, {
      details: { reason: errText(err) },
    });
  }
  beforeHead();
  let out: string[] = [];
  for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2) {
    if (!HOP_HEADERS.has(answer.rawHeaders[i]!.toLowerCase())) out.push(answer.rawHeaders[i]!, answer.rawHeaders[i + 1]!);
  }
  if (fwd.prefix) out = rewriteResponseHeaders(out, fwd);
  const status = answer.statusCode ?? 502;
  res.writeHead(status, answer.statusMessage, out);
  // A plain pipe and its ends, not stream.pipeline: that costs an AbortSignal (and a DOMException) per request.
  const error = await new Promise<string | null>((resolve) => {
    res.once('finish', () => resolve(null));
    res.once('close', () => resolve(res.writableFinished ? null : 'the client closed the connection'));
    answer.once('error', (err) => resolve(errText(err)));
    answer.once('close', () => {
      if (!answer.readableEnded) resolve('the server in the sandbox closed the connection before its answer ended');
    });
    answer.pipe(res);
  });
  res.off('close', clientGone);
  socket.destroy();
  if (error === null) return { status, outcome: 'completed', ...counts(), error: null };
  res.destroy();
  return { status, outcome: 'aborted', ...counts(), error };
}

/**
 * Whether `req` may be sent to the server again after a tunnel failed before any answer: a safe
 * method (RFC 9110 §9.2.1: GET, HEAD, OPTIONS), whose retry a client may make itself (§9.2.2),
 * with no body (nothing of the client's stream was used up).
 */
export function replayable(req: http.IncomingMessage): boolean {
  return (req.method === 'GET' || req.method === 'HEAD' || req.method === 'OPTIONS') && !hasBody(req);
}

/** Whether a request has a body to stream (RFC 9112 §6.3: Transfer-Encoding, or a Content-Length above 0). */
function hasBody(req: http.IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * The connection an HTTP client gets on an early tunnel: what it writes goes out at once (the
 * agent holds it until the server answered); what it reads begins behind the agent's line, once
 * the tunnel answered. A failed tunnel destroys it with the tunnel's error.
 */
function pipelined(early: EarlyTunnel): Duplex {
  const { socket } = early;
  let reading = false;
  let ended = false;
  const connection = new Duplex({
    write: (chunk: Buffer, encoding, callback) => void socket.write(chunk, encoding, callback),
    final: (callback) => {
      socket.end();
      callback();
    },
    read: () => {
      if (reading) socket.resume();
    },
    destroy: (err, callback) => {
      socket.destroy();
      callback(err);
    },
  });
  early.answered.then(
    () => {
      reading = true;
      socket.on('data', (chunk: Buffer) => {
        if (!connection.push(chunk)) socket.pause();
      });
      socket.once('end', () => {
        ended = true;
        connection.push(null);
      });
      socket.resume();
    },
    (err: Error) => connection.destroy(err),
  );
  // Closed before its end was read (an error, a reset): nothing more comes.
  socket.once('close', () => {
    if (!ended) connection.destroy();
  });
  return connection;
}

/**
 * Writes the upgrade request `req` (its head bytes after) over the tunnel and pipes raw bytes
 * between `client` and the tunnel until either side closes. The server's answer (`101`, or any
 * refusal) reaches the client as it is. Resolves when both are closed.
 */
export async function spliceUpgrade(
  tunnel: Tunnel,
  req: http.IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: string,
  fwd: Forwarding,
): Promise<Spliced> {
  const { socket } = tunnel;
  const headers = forwardedHeaders(req.rawHeaders, fwd, true);
  let lines = `${req.method} ${target} HTTP/1.1\r\n`;
  for (let i = 0; i + 1 < headers.length; i += 2) lines += `${headers[i]}: ${headers[i + 1]!.replace(/[\r\n]/g, '')}\r\n`;
  socket.write(`${lines}\r\n`);
  if (head.length > 0) socket.write(head);
  let status: number | null = null;
  let first = true;
  socket.on('data', (chunk: Buffer) => {
    if (!first) return;
    first = false;
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(chunk.subarray(0, 16).toString('latin1'));
    status = m ? Number(m[1]) : null;
  });
  let error: string | null = null;
  const lingers: NodeJS.Timeout[] = [];
  await new Promise<void>((resolve) => {
    let open = 2;
    const closed = (): void => {
      open -= 1;
      if (open === 0) resolve();
    };
    socket.once('close', closed);
    client.once('close', closed);
    socket.on('error', (err) => {
      error ??= errText(err);
      client.destroy();
    });
    client.on('error', (err) => {
      error ??= errText(err);
      socket.destroy();
    });
    // A clean end passes through the pipes after what is buffered; the other side is cut only
    // after LINGER_MS (a peer that never closes its half), or at once after an error.
    socket.once('close', (hadError: boolean) => {
      if (hadError) client.destroy();
      else lingers.push(setTimeout(() => client.destroy(), LINGER_MS).unref());
    });
    client.once('close', () => lingers.push(setTimeout(() => socket.destroy(), LINGER_MS).unref()));
    socket.pipe(client);
    client.pipe(socket);
    socket.resume();
  });
  // Both sides closed: the timers would only hold them in memory.
  for (const timer of lingers) clearTimeout(timer);
  return {
    status,
    outcome: error === null ? 'completed' : 'aborted',
    bytesToSandbox: socket.bytesWritten - tunnel.headerBytesWritten,
    bytesFromSandbox: Math.max(0, socket.bytesRead - tunnel.headerBytes),
    error,
  };
}

function errText(err: unknown): string {
  return err instanceof Error ? ((err as NodeJS.ErrnoException).code ?? err.message) : String(err);
}
