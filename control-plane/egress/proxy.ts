/**
 * The egress proxy: the only way out of a sandbox whose policy says `network.mode: allowlist`.
 *
 * Such a sandbox has no network interface but loopback (Docker `NetworkMode: none`); its agent
 * forwards 127.0.0.1:EGRESS_PROXY_PORT to a Unix socket bind-mounted from the host, where this
 * proxy listens, one socket per lease, so the socket a connection arrives on says which lease's
 * allowlist applies and nothing the sandbox sends can claim another identity.
 *
 * It speaks HTTP/1.1 forward-proxying (absolute-form requests, RFC 9112 §3.2.2) and tunnels
 * (CONNECT, RFC 9110 §9.3.6). For every request it checks the allowlist (rules.ts) on the asked
 * host and port, resolves the name itself, checks the resolved address, and dials exactly that
 * address, so a name that re-resolves to an internal address in between cannot slip through
 * (DNS rebinding). Every connection, allowed or denied, becomes an EgressEvent.
 */
import { chmod, mkdir, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { dirname } from 'node:path';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { EgressEvent } from '../../contract/objects.js';
import { upstreamRoots } from './ca.js';
import { decideHttp } from './http-rules.js';
import { Interceptor, intercepts, type LeaseInterception } from './intercept.js';
import { EgressAllowlist, type EgressDecision, type EgressRule } from './rules.js';
import { asciiHeader, forwardHeaders, parseAuthority, refusalResponse, relayAnswer, stripBrackets, unmapped } from './wire.js';

/** Resolves a host name to its addresses (IPv4 and IPv6), in the order to try them. */
export type Resolve = (host: string) => Promise<string[]>;

export interface EgressProxyDeps {
  resolve: Resolve;
  /** Stores an event of `leaseId`; failures are logged, never thrown at the sandbox. */
  record: (leaseId: string, event: EgressEvent) => Promise<void>;
  /** The call a request's `Proxy-Authorization` names in `leaseId` (attribution.ts `attributedCall`), or null. Default: none. */
  attribute?: (leaseId: string, proxyAuthorization: string | undefined) => string | null;
  /** Adds to a call's counts of injected secrets (egress/store.ts `addInjected`). Default: not counted. */
  countInjected?: (leaseId: string, callId: string, host: string, counts: ReadonlyMap<string, number>) => Promise<void>;
  log: Logger;
  /** Give up dialling a destination after this long, ms. Default 10 000. */
  connectTimeoutMs?: number;
  /** A request's headers must be complete within this long, ms, so a slow client cannot hold a socket. Default 20 000. */
  headersTimeoutMs?: number;
  /** A PEM file of roots intercepted hosts' servers are verified against besides Node's public ones (`SBX_EGRESS_UPSTREAM_CA`). */
  upstreamCaFile?: string | null;
}

/** A tunnel or connection with no bytes either way for this long is closed, ms. */
const IDLE_TIMEOUT_MS = 10 * 60_000;
/** Connections one lease may hold open to its proxy at once. */
const MAX_CONNECTIONS_PER_LEASE = 256;

interface Served {
  server: http.Server;
  sockets: Set<Duplex>;
  /** What a new connection is decided by: replaced by `update` (a live policy change, a phase move). */
  allowlist: EgressAllowlist;
  interception: LeaseInterception | undefined;
  /** The caller's digest of what the rules and interception were made from (`basisOf`). */
  basis: string;
}

export class EgressProxy {
  private readonly served = new Map<string, Served>();
  private readonly interceptor: Interceptor;

  constructor(private readonly deps: EgressProxyDeps) {
    const upstreamCa = upstreamRoots(deps.upstreamCaFile ?? null);
    // Unreadable: said now; each intercepted request then fails (502), never verified against less.
    upstreamCa.catch((err: unknown) => deps.log.error({ err, file: deps.upstreamCaFile }, 'SBX_EGRESS_UPSTREAM_CA is unreadable'));
    this.interceptor = new Interceptor({
      upstreamCa,
      record: deps.record,
      countInjected: deps.countInjected ?? (async () => undefined),
      log: deps.log,
      connectTimeoutMs: deps.connectTimeoutMs ?? 10_000,
    });
  }

  /**
   * Starts serving `leaseId` on the Unix socket `socketPath` (its directory is created with mode
   * 0700; a stale socket there is replaced). With `interception`, CONNECTs to the hosts of its
   * injections are intercepted (intercept.ts). Idempotent per lease.
   */
  async serve(
    leaseId: string,
    rules: readonly EgressRule[],
    socketPath: string,
    interception?: LeaseInterception,
    basis = '',
  ): Promise<void> {
    if (this.served.has(leaseId)) return;
    const headersTimeout = this.deps.headersTimeoutMs ?? 20_000;
    // requestTimeout stays off (a large upload through the proxy may take long; idle sockets are
    // closed by their own timeout); node checks headersTimeout every connectionsCheckingInterval.
    const server = http.createServer({ headersTimeout, requestTimeout: 0, connectionsCheckingInterval: Math.min(headersTimeout, 5000) });
    server.maxConnections = MAX_CONNECTIONS_PER_LEASE;
    const served: Served = { server, sockets: new Set(), allowlist: new EgressAllowlist(rules), interception, basis };
    const { sockets } = served;
    server.on('connection', (socket: net.Socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
      // A sandbox that hangs up mid-answer must cost it its connection, never this process:
      // an 'error' event without a listener would throw.
      socket.on('error', () => socket.destroy());
      socket.setTimeout(IDLE_TIMEOUT_MS, () => socket.destroy());
    });
    server.on('request', (req, res) => void this.forward(leaseId, served.allowlist, req, res));
    server.on('connect', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      // node:http hands the socket over without its own 'error' listener (http docs, event
      // 'connect'); this one must be in place before anything is written or awaited.
      socket.on('error', () => socket.destroy());
      void this.tunnel(leaseId, served.allowlist, req, socket, head, served.interception);
    });
    server.on('clientError', (_err, socket) => socket.destroy());
    await mkdir(dirname(socketPath), { recursive: true, mode: 0o700 });
    await rm(socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // Only root may connect (inside the sandbox: the agent, not the tool user, who goes through
    // the agent's loopback listener like every client).
    await chmod(socketPath, 0o600);
    this.served.set(leaseId, served);
  }

  /**
   * Takes a connection that came through the node relay (agent-link/link-listener.ts) as one to
   * `leaseId`'s socket; destroys it when this process does not serve the lease.
   */
  adopt(leaseId: string, socket: net.Socket): void {
    const served = this.served.get(leaseId);
    if (served === undefined) socket.destroy();
    else {
      served.server.emit('connection', socket);
      // The link listener paused it to read the header; the HTTP parser now reads it.
      socket.resume();
    }
  }

  /**
   * Decides `leaseId`'s connections by `rules` and `interception` from now on, and cuts every
   * connection open through its proxy (those the old rules let through). False when this
   * process does not serve the lease.
   */
  update(leaseId: string, rules: readonly EgressRule[], interception: LeaseInterception | undefined, basis: string): boolean {
    const served = this.served.get(leaseId);
    if (!served) return false;
    Object.assign(served, { allowlist: new EgressAllowlist(rules), interception, basis });
    for (const socket of served.sockets) socket.destroy();
    return true;
  }

  /** Stops serving `leaseId` and cuts its open connections (idempotent). */
  async stop(leaseId: string): Promise<void> {
    const served = this.served.get(leaseId);
    if (!served) return;
    this.served.delete(leaseId);
    for (const socket of served.sockets) socket.destroy();
    await new Promise<void>((resolve) => served.server.close(() => resolve()));
  }

  /** Stops every lease this process serves. */
  async close(): Promise<void> {
    await Promise.all([...this.served.keys()].map((id) => this.stop(id)));
  }

  /** The basis `serve` or `update` last got for the lease, or null when this process does not serve it. */
  basisOf(leaseId: string): string | null {
    return this.served.get(leaseId)?.basis ?? null;
  }

  /** True while this process serves the lease's proxy. */
  serves(leaseId: string): boolean {
    return this.served.has(leaseId);
  }

  /**
   * Decides a destination: the allowlist on (host, port), then the proxy's own resolution and
   * the check of each address, in order; the first allowed address is the one to dial.
   */
  private async decide(
    allowlist: EgressAllowlist,
    host: string,
    port: number,
  ): Promise<{ decision: EgressDecision; address: string | null; error: string | null }> {
    const first = allowlist.matchDestination(host, port);
    if (!first.allowed) return { decision: first, address: null, error: null };
    if (net.isIP(stripBrackets(host))) return { decision: first, address: unmapped(stripBrackets(host)), error: null };
    let addresses: string[];
    try {
      addresses = await this.deps.resolve(host);
    } catch (err) {
      return { decision: first, address: null, error: `resolve failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
    }
    if (addresses.length === 0) return { decision: first, address: null, error: 'no address' };
    let refusal: EgressDecision | undefined;
    for (const address of addresses) {
      const check = allowlist.checkAddress(address, port);
      if (check.allowed) return { decision: { allowed: true, rule: first.rule }, address, error: null };
      refusal ??= check;
    }
    return { decision: refusal!, address: addresses[0]!, error: null };
  }

  private async tunnel(
    leaseId: string,
    allowlist: EgressAllowlist,
    req: http.IncomingMessage,
    client: Duplex,
    head: Buffer,
    interception: LeaseInterception | undefined,
  ): Promise<void> {
    const started = Date.now();
    const target = parseAuthority(req.url ?? '');
    if (!target) {
      client.end('HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nsbx egress: CONNECT needs host:port\n');
      return;
    }
    const callId = this.callOf(leaseId, req);
    const event = this.eventFor(target.host, target.port, 'CONNECT', started, callId);
    let { decision, address, error } = await this.decide(allowlist, target.host, target.port);
    const l7 = decision.allowed ? allowlist.httpOf(target.host, target.port) : null;
    // Rules on method and path hold only where the proxy reads the requests: never tunnelled past.
    if (l7 && interception === undefined)
      decision = { allowed: false, rule: `${l7.rule} has http rules, which this proxy cannot see through` };
    Object.assign(event, { decision: decision.allowed ? 'allowed' : 'denied', rule: decision.rule, address, error });
    if (!decision.allowed || !address) {
      client.end(refusalResponse(decision, target, error));
      await this.finish(leaseId, event, started);
      return;
    }
    if (l7 || intercepts(interception, target.host)) {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const to = { leaseId, host: target.host, port: target.port, address, rule: decision.rule, http: l7, callId };
      await this.interceptor.serve(client, head, to, interception!);
      return;
    }
    // A relay of small writes (TLS handshakes): no Nagle wait for an ACK the server delays.
    const upstream = net.connect({ host: address, port: target.port, noDelay: true });
    upstream.setTimeout(this.deps.connectTimeoutMs ?? 10_000, () => upstream.destroy(new Error('connect timeout')));
    upstream.once('connect', () => {
      upstream.setTimeout(IDLE_TIMEOUT_MS, () => upstream.destroy());
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) {
        event.bytesOut += head.length;
        upstream.write(head);
      }
      client.on('data', (chunk: Buffer) => (event.bytesOut += chunk.length));
      upstream.on('data', (chunk: Buffer) => (event.bytesIn += chunk.length));
      client.pipe(upstream);
      upstream.pipe(client);
    });
    let connected = false;
    upstream.once('connect', () => (connected = true));
    await new Promise<void>((resolve) => {
      let open = 2;
      const done = (): void => {
        if (--open === 0) resolve();
      };
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        event.error ??= err.code ?? err.message;
        if (!connected && client.writable)
          client.end(
            `HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\r\nsbx egress: ${target.host}:${target.port} (${address}): ${event.error}\n`,
          );
        else client.destroy();
      });
      client.on('error', () => upstream.destroy());
      upstream.once('close', () => {
        client.end();
        done();
      });
      client.once('close', () => {
        upstream.destroy();
        done();
      });
    });
    await this.finish(leaseId, event, started);
  }

  private async forward(leaseId: string, allowlist: EgressAllowlist, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const started = Date.now();
    let url: URL | undefined;
    try {
      url = new URL(req.url ?? '');
    } catch {
      url = undefined;
    }
    if (!url || url.protocol !== 'http:') {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('sbx egress: send absolute http:// URLs here, and use CONNECT for https\n');
      return;
    }
    const port = url.port === '' ? 80 : Number(url.port);
    const host = stripBrackets(url.hostname);
    const event = this.eventFor(host, port, req.method ?? 'GET', started, this.callOf(leaseId, req));
    let { decision, address, error } = await this.decide(allowlist, host, port);
    const l7 = decision.allowed ? allowlist.httpOf(host, port) : null;
    if (l7) decision = decideHttp(l7.http, l7.rule, req.method ?? 'GET', `${url.pathname}${url.search}`);
    Object.assign(event, { decision: decision.allowed ? 'allowed' : 'denied', rule: decision.rule, address, error });
    if (l7) event.path = url.pathname.slice(0, 1024);
    if (!decision.allowed || !address) {
      res.writeHead(decision.allowed ? 502 : 403, { 'content-type': 'text/plain', 'x-sbx-egress-rule': asciiHeader(decision.rule) });
      res.end(`sbx egress: ${decision.allowed ? 'failed' : 'denied'} ${host}:${port}: ${error ?? decision.rule}\n`);
      req.resume();
      await this.finish(leaseId, event, started);
      return;
    }
    const headers = forwardHeaders(req.headers);
    // RFC 9112 §3.2.2: the authority of the absolute-form target is the Host, whatever the
    // client wrote there (a made-up Host would reach another virtual host at the same address).
    headers.host = url.host;
    // Framing is set here, never inherited: a body goes on only with the client's own framing
    // (length or chunked), so leftover bytes cannot reach the upstream as a second request.
    const chunked = req.headers['transfer-encoding'] !== undefined;
    if (chunked) {
      headers['transfer-encoding'] = 'chunked';
      delete headers['content-length'];
    }
    const hasBody = chunked || Number(req.headers['content-length'] ?? 0) > 0;
    await new Promise<void>((resolve) => {
      // agent: false — a connection of this request alone: no upstream socket is pooled and
      // reused for another lease's request.
      const upstream = http.request({
        host: address,
        port,
        method: req.method,
        path: `${url.pathname}${url.search}`,
        headers,
        setHost: false,
        agent: false,
        timeout: this.deps.connectTimeoutMs ?? 10_000,
      });
      relayAnswer(upstream, res, event, `${host}:${port} (${address})`, (answer) => forwardHeaders(answer.headers)).then(resolve);
      if (hasBody) {
        req.on('data', (chunk: Buffer) => (event.bytesOut += chunk.length));
        req.pipe(upstream);
      } else {
        req.resume();
        upstream.end();
      }
    });
    await this.finish(leaseId, event, started);
  }

  private callOf(leaseId: string, req: http.IncomingMessage): string | null {
    return this.deps.attribute?.(leaseId, req.headers['proxy-authorization']) ?? null;
  }

  private eventFor(host: string, port: number, method: string, started: number, callId: string | null): EgressEvent {
    return {
      callId,
      at: new Date(started).toISOString(),
      host,
      port,
      method,
      decision: 'denied',
      rule: '',
      address: null,
      bytesOut: 0,
      bytesIn: 0,
      durationMs: 0,
      error: null,
    };
  }

  private async finish(leaseId: string, event: EgressEvent, started: number): Promise<void> {
    event.durationMs = Date.now() - started;
    await this.deps
      .record(leaseId, event)
      .catch((err: unknown) => this.deps.log.warn({ leaseId, err }, 'could not record an egress event'));
  }
}
