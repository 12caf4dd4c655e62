/**
 * The egress proxy's HTTP wire parts (RFC 9110, RFC 9112): hop-by-hop headers, CONNECT targets,
 * addresses as dialled, and its refusals.
 */
import type http from 'node:http';
import type { EgressEvent } from '../../contract/objects.js';
import type { EgressDecision } from './rules.js';

/** Headers that belong to one hop (RFC 9110 §7.6.1) or to the proxy, never forwarded. */
export const HOP_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);

/**
 * `headers` without hop-by-hop ones: the fixed list, and every header the `Connection` header
 * names (RFC 9110 §7.6.1). `host` is left out too; the caller sets it.
 */
export function forwardHeaders(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const named = connectionNamed(headers.connection);
  const out: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers))
    if (!HOP_HEADERS.has(name) && !named.has(name) && value !== undefined) out[name] = value;
  return out;
}

/** `host:port` or `[v6]:port` of a CONNECT request target (RFC 9110 §9.3.6 authority-form). */
export function parseAuthority(text: string): { host: string; port: number } | undefined {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:\[\]\s]+):(\d{1,5})$/.exec(text);
  if (!match) return undefined;
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return undefined;
  return { host: stripBrackets(match[1]!), port };
}

export function stripBrackets(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** `::ffff:a.b.c.d` dials as the IPv4 address it names (the allowlist judged it as that). */
export function unmapped(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return mapped ? mapped[1]! : address;
}

export function refusalResponse(decision: EgressDecision, target: { host: string; port: number }, error: string | null): string {
  const status = decision.allowed ? '502 Bad Gateway' : '403 Forbidden';
  const why = error ?? decision.rule;
  return `HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nX-Sbx-Egress-Rule: ${asciiHeader(decision.rule)}\r\n\r\nsbx egress: ${decision.allowed ? 'failed' : 'denied'} ${target.host}:${target.port}: ${why}\n`;
}

export function asciiHeader(text: string): string {
  return text.replace(/[^\x20-\x7e]/g, '?');
}

/**
 * The headers a `Connection` header names (RFC 9110 §7.6.1), to be dropped with it — never the
 * message's framing (`Content-Length`, `Transfer-Encoding`) nor `Host`: naming them would strip
 * a body's length and let it through as a second request.
 */
export function connectionNamed(connection: string | string[] | undefined): Set<string> {
  const framing = new Set(['content-length', 'transfer-encoding', 'host']);
  return new Set(
    String(connection ?? '')
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter((t) => t !== '' && !framing.has(t)),
  );
}

/**
 * Sends `upstream`'s answer to `res` (its headers as `headersOf` gives them), counting the body's
 * bytes into `event.bytesIn`; a failure before the answer is `502` naming `target`, after it the
 * client's connection is cut, and the error lands in `event.error`. The client leaving destroys
 * `upstream`. `beforeAnswer` runs before the first byte of any answer (the upstream's, or the
 * 502) goes to the client: what must be stored before the client can see the exchange answered.
 * It reports its own failures. Resolves when the exchange is over, whichever way; never rejects.
 */
export function relayAnswer(
  upstream: http.ClientRequest,
  res: http.ServerResponse,
  event: EgressEvent,
  target: string,
  headersOf: (answer: http.IncomingMessage) => http.OutgoingHttpHeaders | string[],
  beforeAnswer: () => Promise<void> = async () => undefined,
): Promise<void> {
  return new Promise((resolve) => {
    const answered = (): Promise<void> => beforeAnswer().catch(() => undefined);
    upstream.once('timeout', () => upstream.destroy(new Error('timeout')));
    upstream.once('response', (answer) => {
      upstream.setTimeout(0);
      // The answer waits, unread (paused), until beforeAnswer is done.
      void answered().then(() => {
        if (res.destroyed) return;
        res.writeHead(answer.statusCode ?? 502, headersOf(answer));
        answer.on('data', (chunk: Buffer) => (event.bytesIn += chunk.length));
        answer.pipe(res);
        answer.once('end', resolve);
        answer.once('error', () => {
          res.destroy();
          resolve();
        });
      });
    });
    upstream.once('error', (err: NodeJS.ErrnoException) => {
      event.error = err.code ?? err.message;
      void answered().then(() => {
        if (!res.headersSent && !res.destroyed)
          res.writeHead(502, { 'content-type': 'text/plain' }).end(`sbx egress: ${target}: ${event.error}\n`);
        else res.destroy();
        resolve();
      });
    });
    res.once('close', () => {
      upstream.destroy();
      resolve();
    });
  });
}
