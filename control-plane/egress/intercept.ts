/**
 * The egress proxy's TLS interception, for the hosts of a lease's `secrets.inject` rules only
 * (issue 16 part 1): after the CONNECT is allowed, the proxy ends the sandbox's TLS with a
 * certificate of the lease's own CA (ca.ts), reads each HTTP/1.1 request, puts the secret values
 * in place of their placeholders where a rule says (inject.ts), and sends the request on over a
 * new TLS connection to the address the allowlist check resolved, verifying the server against
 * the public roots (or the admin's `SBX_EGRESS_UPSTREAM_CA`). Every request is an egress event
 * with its method, path and the secrets injected (names and counts, never values).
 *
 * What it refuses, documented in policies/README.md: HTTP/2 (only `http/1.1` is offered by
 * ALPN, so clients fall back), upgrades such as WebSocket (`501`), and a client that does not
 * trust the lease CA (certificate pinning): its handshake fails, nothing reaches the server, and
 * the event records why.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import type { Logger } from 'pino';
import type { EgressEvent } from '../../contract/objects.js';
import type { LeaseCa } from './ca.js';
import { decideHttp } from './http-rules.js';
import type { HttpRules } from './schema.js';
import { asciiHeader, connectionNamed, HOP_HEADERS, relayAnswer } from './wire.js';

import { bodyInjector, injectHead, injectionsFor, type InjectedCounts, type Injection } from './inject.js';

/** What a lease's proxy needs to intercept: its CA and its injections (placeholders and values). */
export interface LeaseInterception {
  ca: LeaseCa;
  injections: readonly Injection[];
}

/** An allowed CONNECT being intercepted: where it goes, the event fields of its allow decision, and the host rule's L7 rules. */
export interface InterceptTarget {
  leaseId: string;
  host: string;
  port: number;
  address: string;
  rule: string;
  /** The host rule's `http` section and its text (http-rules.ts), or null. */
  http: { http: HttpRules; rule: string } | null;
  /** The call the CONNECT named with its proxy credential (attribution.ts), or null. */
  callId: string | null;
}

export interface InterceptorDeps {
  /** PEM certificates the upstream servers are verified against (read once, when the proxy starts). */
  upstreamCa: Promise<readonly string[]>;
  record: (leaseId: string, event: EgressEvent) => Promise<void>;
  /** Adds to a call's counts of injected secrets (for its receipt); stored before the client sees its answer end. */
  countInjected: (leaseId: string, callId: string, host: string, counts: ReadonlyMap<string, number>) => Promise<void>;
  log: Logger;
  connectTimeoutMs: number;
}

/** True when some injection of the lease names `host` (a DNS name; an IP literal never is intercepted). */
export function intercepts(interception: LeaseInterception | undefined, host: string): boolean {
  return interception !== undefined && net.isIP(host) === 0 && injectionsFor(host, interception.injections).length > 0;
}

/** How long a sandbox's TLS handshake may take, and an intercepted connection may idle, ms. */
const HANDSHAKE_TIMEOUT_MS = 20_000;
/** How long an answer waits for its call's injection counts to be stored, ms. */
const COUNT_WAIT_MS = 2000;
const IDLE_TIMEOUT_MS = 120_000;

export class Interceptor {
  /** Parses the decrypted requests of every intercepted connection; each socket carries its target. */
  private readonly server = http.createServer({ requestTimeout: 0 });
  private readonly targets = new WeakMap<object, { target: InterceptTarget; interception: LeaseInterception }>();
  /** The last request of each connection in flight (see the 'request' listener). */
  private readonly turns = new WeakMap<object, Promise<void>>();
  /** The upstream roots as one TLS context, made once: a context per request costs tens of milliseconds. */
  private readonly upstreamContext: Promise<tls.SecureContext | Error>;

  constructor(private readonly deps: InterceptorDeps) {
    this.upstreamContext = deps.upstreamCa.then(
      (ca) => tls.createSecureContext({ ca: [...ca], minVersion: 'TLSv1.2' }),
      (err: Error) => err,
    );
    // One request of a connection at a time: pipelined requests wait their turn (unread), so a
    // connection holds at most one upstream connection. A failure answers 502, never throws.
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const turn = (this.turns.get(req.socket) ?? Promise.resolve())
        .then(() => this.forward(req, res))
        .catch((err: unknown) => {
          this.deps.log.warn({ err }, 'an intercepted request failed');
          if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('sbx egress: the request could not be sent on\n');
          else res.destroy();
        });
      this.turns.set(req.socket, turn);
    });
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex) => {
      socket.on('error', () => socket.destroy());
      const found = this.targets.get(req.socket);
      socket.end(
        'HTTP/1.1 501 Not Implemented\r\ncontent-type: text/plain\r\n\r\nsbx egress: upgrades (WebSocket) are not offered on a host with credential injection\n',
      );
      if (found) void this.record(found.target, eventOf(found.target, req.method ?? 'GET', pathOf(req.url), Date.now(), 'upgrade refused'));
    });
    this.server.on('clientError', (_err, socket) => socket.destroy());
  }

  /**
   * Takes over `client` (the sandbox's side of an allowed CONNECT, `200` already written;
   * `head` the bytes that came with the CONNECT) and ends its TLS as the target host. Resolves
   * when the connection closed.
   */
  async serve(client: Duplex, head: Buffer, target: InterceptTarget, interception: LeaseInterception): Promise<void> {
    const started = Date.now();
    if (head.length > 0) client.unshift(head);
    let context: tls.SecureContext;
    try {
      context = interception.ca.contextFor(target.host.toLowerCase());
    } catch (err) {
      client.destroy();
      await this.record(target, eventOf(target, 'CONNECT', null, started, `could not issue a certificate: ${(err as Error).message}`));
      return;
    }
    const secure = new tls.TLSSocket(client as net.Socket, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    let handshaken = false;
    // A handshake must end in time, and a connection may not idle for ever (the HTTP server here
    // never listens, so its own header timeout does not run).
    const handshake = setTimeout(
      () => secure.destroy(new Error(`no TLS handshake within ${HANDSHAKE_TIMEOUT_MS / 1000} s`)),
      HANDSHAKE_TIMEOUT_MS,
    );
    secure.setTimeout(IDLE_TIMEOUT_MS, () => secure.destroy());
    secure.once('close', () => clearTimeout(handshake));
    secure.once('secure', () => {
      clearTimeout(handshake);
      handshaken = true;
      this.targets.set(secure, { target, interception });
      this.server.emit('connection', secure);
    });
    await new Promise<void>((resolve) => {
      secure.on('error', (err: Error) => {
        // A client that does not trust the lease CA (pinning) ends here: nothing went upstream.
        if (!handshaken)
          void this.record(
            target,
            eventOf(target, 'CONNECT', null, started, `tls: the sandbox's client refused the interception: ${err.message}`),
          );
        secure.destroy();
      });
      secure.once('close', () => resolve());
    });
  }

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const found = this.targets.get(req.socket);
    if (!found) {
      res.destroy();
      return;
    }
    const { target, interception } = found;
    const started = Date.now();
    const all = interception.injections;
    const applicable = injectionsFor(target.host, all);
    const event = eventOf(target, req.method ?? 'GET', pathOf(req.url), started, null);
    // Everything is decided for the CONNECT's host: a request naming another (an absolute-form
    // target) is refused, and the Host the server gets is that host, whatever the sandbox wrote.
    if (!(req.url ?? '').startsWith('/')) {
      event.decision = 'denied';
      event.rule = 'an intercepted request must name a path (origin-form), not another target';
      res.writeHead(400, { 'content-type': 'text/plain' }).end(`sbx egress: ${event.rule}\n`);
      req.resume();
      return this.record(target, event);
    }
    const named = connectionNamed(req.headers.connection);
    const raw: string[] = [];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i]!.toLowerCase();
      if (!HOP_HEADERS.has(name) && !named.has(name)) raw.push(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
    }
    raw.push('Host', target.port === 443 ? target.host : `${target.host}:${target.port}`);
    if (target.http) {
      const decision = decideHttp(target.http.http, target.http.rule, req.method ?? 'GET', req.url ?? '/');
      event.rule = decision.rule;
      if (!decision.allowed) {
        event.decision = 'denied';
        res.writeHead(403, { 'content-type': 'text/plain', 'x-sbx-egress-rule': asciiHeader(decision.rule) });
        res.end(`sbx egress: denied ${req.method} ${pathOf(req.url)}: ${decision.rule}\n`);
        req.resume();
        return this.record(target, event);
      }
    }
    const head = injectHead(req.url ?? '/', raw, applicable, all);
    // A value that cannot be a header value (a stored secret ending in a newline, say) is not sent.
    if (head.headers.some((value, i) => i % 2 === 1 && /[\r\n\0]|[^\x00-\xff]/.test(value))) {
      event.error = 'an injected value cannot go in a header (it holds CR, LF, NUL or a character beyond Latin-1)';
      res.writeHead(502, { 'content-type': 'text/plain' }).end(`sbx egress: ${event.error}\n`);
      req.resume();
      return this.record(target, event);
    }
    const injected: InjectedCounts = head.injected;
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    const count = (secret: string): void => void injected.set(secret, (injected.get(secret) ?? 0) + 1);
    const swap = hasBody ? bodyInjector(req.headers['content-type'], applicable, count) : null;
    // The client's framing, or chunked when the body is rewritten (its length changes) or came chunked.
    const chunked = swap !== null || req.headers['transfer-encoding'] !== undefined;
    const framed = withoutContentLength(head.headers);
    const headers = chunked
      ? framed.concat('Transfer-Encoding', 'chunked')
      : hasBody
        ? framed.concat('Content-Length', String(req.headers['content-length']))
        : framed;
    if (head.stray.length > 0) {
      event.strayPlaceholders = head.stray;
      this.deps.log.warn(
        { sandboxId: target.leaseId, host: target.host, secrets: head.stray },
        'a placeholder was sent where no rule puts its value',
      );
    }
    const secureContext = await this.upstreamContext;
    if (secureContext instanceof Error) {
      event.error = `the upstream roots are unreadable: ${secureContext.message}`;
      res.writeHead(502, { 'content-type': 'text/plain' }).end(`sbx egress: ${event.error}\n`);
      req.resume();
      return this.record(target, event);
    }
    let counted = false;
    // The call's receipt counts what went into its requests: stored before the client sees any
    // answer, so before the call can end (a body still streaming then is in the event only).
    // Bounded: Redis away, the answer goes on after COUNT_WAIT_MS without it (logged).
    const countForCall = async (): Promise<void> => {
      if (target.callId === null || injected.size === 0 || counted) return;
      counted = true;
      const counting = this.deps.countInjected(target.leaseId, target.callId, target.host, new Map(injected));
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), COUNT_WAIT_MS)));
      const outcome = await Promise.race([counting.then(() => 'counted' as const), late])
        .catch((err: unknown) => err)
        .finally(() => clearTimeout(timer));
      if (outcome !== 'counted')
        this.deps.log.warn(
          { sandboxId: target.leaseId, callId: target.callId, err: outcome },
          "could not count injected secrets for the call's receipt (the egress event has them)",
        );
    };
    await new Promise<void>((resolve) => {
      // `secureContext` goes on to tls.connect (which takes it), though https' types leave it out.
      const options: https.RequestOptions & { secureContext: tls.SecureContext } = {
        host: target.address,
        port: target.port,
        servername: target.host,
        method: req.method,
        path: head.path,
        headers,
        setHost: false,
        // A connection of this request alone: nothing pooled is shared with another lease.
        agent: false,
        secureContext,
        timeout: this.deps.connectTimeoutMs,
      };
      const upstream = https.request(options);
      // Small writes (the handshake, a request head) go at once: no Nagle wait for a delayed ACK.
      upstream.setNoDelay(true);
      const answerHeaders = (answer: http.IncomingMessage): string[] => {
        const out: string[] = [];
        for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2)
          if (!HOP_HEADERS.has(answer.rawHeaders[i]!.toLowerCase())) out.push(answer.rawHeaders[i]!, answer.rawHeaders[i + 1]!);
        return out;
      };
      relayAnswer(upstream, res, event, `${target.host}:${target.port} (${target.address})`, answerHeaders, countForCall).then(resolve);
      req.on('data', (chunk: Buffer) => (event.bytesOut += chunk.length));
      if (!hasBody) {
        req.resume();
        upstream.end();
      } else if (swap) req.pipe(swap).pipe(upstream);
      else req.pipe(upstream);
    });
    // The client gone before any answer (relayAnswer then counted nothing): counted now.
    await countForCall();
    if (injected.size > 0) event.credentialsInjected = [...injected].map(([secret, count]) => ({ secret, host: target.host, count }));
    event.durationMs = Date.now() - started;
    await this.record(target, event);
  }

  private async record(target: InterceptTarget, event: EgressEvent): Promise<void> {
    await this.deps
      .record(target.leaseId, event)
      .catch((err: unknown) => this.deps.log.warn({ leaseId: target.leaseId, err }, 'could not record an egress event'));
  }
}

function eventOf(target: InterceptTarget, method: string, path: string | null, started: number, error: string | null): EgressEvent {
  return {
    at: new Date(started).toISOString(),
    host: target.host,
    port: target.port,
    method,
    decision: 'allowed',
    rule: target.rule,
    address: target.address,
    bytesOut: 0,
    bytesIn: 0,
    durationMs: Date.now() - started,
    error,
    callId: target.callId,
    ...(path === null ? {} : { path }),
  };
}

/** The path of a request target, without its query (a query may carry a credential). */
function pathOf(url: string | undefined): string {
  const target = url ?? '/';
  const q = target.indexOf('?');
  return (q < 0 ? target : target.slice(0, q)).slice(0, 1024);
}

function withoutContentLength(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() !== 'content-length') out.push(raw[i]!, raw[i + 1]!);
  return out;
}
