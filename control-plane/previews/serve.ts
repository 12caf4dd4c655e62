/**
 * One preview exchange, whoever routed it (fastify's routes, routes.ts, or the fast path,
 * fast-path.ts): checks the port against the lease's policy, opens a tunnel to it, splices the
 * request through (proxy.ts) and appends the preview log, also when refused or failed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AppError } from '../../contract/errors.js';
import type { PreviewEvent } from '../../contract/previews.js';
import { upgradeHead } from '../http/upgrade.js';
import type { LeaseRecord } from '../leases/store.js';
import { loggedPath, upstreamTarget } from './paths.js';
import { replayable, spliceHttp, spliceUpgrade, type Forwarding, type Spliced } from './proxy.js';
import { closedBeforeAnswer, type EarlyTunnel, type Tunnel } from '../agent-link/tunnels.js';
import type { PreviewService } from './service.js';

/** Error codes that end a preview before or instead of the server's answer, as log outcomes. */
const OUTCOMES: Partial<Record<string, PreviewEvent['outcome']>> = {
  'preview.port_denied': 'denied',
  'preview.invalid_path': 'invalid_path',
  'preview.port_closed': 'port_closed',
  'preview.upstream_failed': 'upstream_failed',
  'preview.agent_unreachable': 'agent_unreachable',
};

/** What a preview request reaches and on whose behalf. */
export interface PreviewTarget {
  lease: LeaseRecord;
  port: number;
  via: PreviewEvent['via'];
  keyId: string;
  tenant: string;
  /** Path segments of the prefix before the app's path, and the prefix itself (X-Forwarded-Prefix). */
  prefixSegments: number;
  prefix: string;
  /** The request target as the client sent it (before any host rewrite). */
  rawUrl: string;
}

/** The client's side of the exchange. */
export interface PreviewExchange {
  req: IncomingMessage;
  res: ServerResponse;
  /** `http` or `https`, as the client reached the control plane (X-Forwarded-Proto). */
  protocol: string;
  /** Called once the exchange takes over the response (before the server's head is written, or an upgrade's socket). */
  hijack(): void;
}

/**
 * Proxies one request to the target's port and logs it. Throws AppError (nothing written to
 * the client yet): `preview.port_denied` (403), `preview.invalid_path` (400), and the tunnel's
 * `preview.port_closed`, `preview.upstream_failed`, `preview.agent_unreachable` (502/504).
 * Resolves once the exchange ended and is logged.
 */
export async function servePreview(previews: PreviewService, exchange: PreviewExchange, t: PreviewTarget): Promise<void> {
  const { req } = exchange;
  const startedMs = Date.now();
  const upgrade = (req as { upgrade?: boolean }).upgrade === true;
  let path = loggedPath(t.rawUrl, t.prefixSegments);
  const record = (
    spliced: Partial<Spliced> & Pick<Spliced, 'status'>,
    outcome: PreviewEvent['outcome'],
    error: string | null,
  ): Promise<void> =>
    previews.record(t.lease.id, {
      at: new Date(startedMs).toISOString(),
      port: t.port,
      via: t.via,
      keyId: t.keyId,
      tenant: t.tenant,
      kind: upgrade ? 'websocket' : 'http',
      method: req.method ?? 'GET',
      path: path.split('?')[0]!.slice(0, 512),
      status: spliced.status,
      outcome,
      bytesToSandbox: spliced.bytesToSandbox ?? 0,
      bytesFromSandbox: spliced.bytesFromSandbox ?? 0,
      durationMs: Date.now() - startedMs,
      error,
    });
  let spliced: Spliced;
  try {
    previews.authorize(t.lease, t.port);
    const target = upstreamTarget(t.rawUrl, t.prefixSegments);
    path = target;
    const fwd: Forwarding = { port: t.port, prefix: t.prefix, protocol: exchange.protocol };
    if (upgrade) {
      const tunnel = await previews.open(t.lease, t.port);
      exchange.hijack();
      spliced = await spliceUpgrade(tunnel, req, req.socket, upgradeHead(req), target, fwd);
    } else {
      const splice = (tunnel: Tunnel | EarlyTunnel): Promise<Spliced> =>
        spliceHttp(tunnel, req, exchange.res, target, fwd, exchange.hijack);
      const signalled = async (): Promise<Spliced> => splice(await previews.open(t.lease, t.port));
      // A plain request rides early data when it can: it reaches the server one round trip through the agent sooner.
      const early = await previews.openEarly(t.lease, t.port);
      spliced =
        early === null
          ? await signalled()
          : await splice(early).catch((err: unknown) => {
              // The pooled connection closed before the agent said anything (it restarted): what
              // can be sent twice goes again, on a connection asked for; the rest fails as it did.
              if (!closedBeforeAnswer(err) || !replayable(req)) throw err;
              return signalled();
            });
    }
  } catch (err) {
    const outcome = err instanceof AppError ? OUTCOMES[err.code] : undefined;
    // Logged, not waited for: a refusal leaves at once (the log gathers its writes, store.ts).
    if (outcome) void record({ status: null }, outcome, err instanceof AppError ? err.code : null);
    throw err;
  }
  await record(spliced, spliced.outcome, spliced.error);
}
