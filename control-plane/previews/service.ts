/**
 * Port previews (issue 13 part 8): which ports a lease may expose, signed URLs, opening a tunnel
 * to a server in the sandbox, and the preview log. The HTTP splicing is proxy.ts; the routes
 * are routes.ts. Imports no fastify, dockerode or ioredis.
 */
import { AppError } from '../../contract/errors.js';
import type { PreviewEvent, PreviewUrl } from '../../contract/previews.js';
import type { Principal } from '../http/auth.js';
import { SIGNED_URL_PRINCIPAL } from '../http/signed-urls.js';
import type { LeaseRecord } from '../leases/store.js';
import type { PortRule } from '../policies/ports.js';
import type { PreviewLog } from './store.js';
import { signPreviewToken, verifyPreviewToken, type PreviewGrant } from './tokens.js';
import type { EarlyTunnel, AgentTunnels, Tunnel } from '../agent-link/tunnels.js';

/** Default and largest lifetime of a signed preview URL, seconds. */
export const PREVIEW_URL_DEFAULT_SECONDS = 3600;
export const PREVIEW_URL_MAX_SECONDS = 7 * 24 * 3600;

/** True when `port` is one of `allowed` or in one of its ranges. */
export function portAllowed(allowed: readonly PortRule[], port: number): boolean {
  return allowed.some((rule) => (typeof rule === 'number' ? rule === port : rule.from <= port && port <= rule.to));
}

/** `<port>-<sandbox id>`, the first label of a preview host; null when `label` is not one. */
export function parseHostLabel(label: string): { port: number; sandboxId: string } | null {
  const m = /^(\d{1,5})-([A-Za-z0-9_-]{1,128})$/.exec(label);
  if (!m) return null;
  const port = Number(m[1]);
  return port >= 1 && port <= 65535 ? { port, sandboxId: m[2]! } : null;
}

export interface PreviewServiceDeps {
  tunnels: Pick<AgentTunnels, 'open' | 'openEarly'>;
  log: Pick<PreviewLog, 'append' | 'read'>;
  /** The lease if `by` may see it (`lease.not_found` otherwise), and whether it may be used now. */
  leases: { visible(id: string, by: Principal): Promise<LeaseRecord>; usable(lease: LeaseRecord): LeaseRecord };
  /** HMAC key of signed preview URLs (32 bytes). */
  key: Buffer;
  /** Host-based routing: `<port>-<id>.<domain>` (domain may carry `:port`), or null when off. */
  domain: string | null;
  now: () => Date;
  /** Failures to write the log are reported here, never to the client. */
  warn: (obj: object, msg: string) => void;
}

export class PreviewService {
  constructor(private readonly deps: PreviewServiceDeps) {}

  /** Throws AppError `preview.port_denied` (403) unless the lease's policy allows `port`. */
  authorize(lease: LeaseRecord, port: number): void {
    const allowed = lease.policySnapshot.ports.allowed;
    if (!portAllowed(allowed, port))
      throw new AppError('preview.port_denied', `the sandbox's policy does not allow previews of port ${port}`, {
        details: { port, allowed, policy: lease.policy.name },
      });
  }

  /**
   * A signed URL for `port` of `lease`, valid `expiresInSeconds` (capped by the lease's own
   * `expiresAt`: a URL never outlives its sandbox's current TTL). `base` is the API's origin as
   * the caller reached it (`http://host:port`). Throws `preview.port_denied`.
   */
  mint(lease: LeaseRecord, port: number, by: Principal, expiresInSeconds: number, base: { protocol: string; host: string }): PreviewUrl {
    this.authorize(lease, port);
    const nowMs = this.deps.now().getTime();
    const expiresMs = Math.min(nowMs + expiresInSeconds * 1000, Date.parse(lease.expiresAt));
    const grant: PreviewGrant = { sandboxId: lease.id, port, expiresAt: new Date(expiresMs), keyId: by.keyId };
    const token = signPreviewToken(this.deps.key, grant);
    const path = `/v1/previews/${lease.id}/${token}/`;
    const hostUrl =
      this.deps.domain === null ? null : `${base.protocol}://${port}-${lease.id}.${this.deps.domain}/?${PREVIEW_TOKEN_PARAM}=${token}`;
    return { url: hostUrl ?? `${base.protocol}://${base.host}${path}`, path, hostUrl, expiresAt: grant.expiresAt.toISOString(), port };
  }

  /**
   * The lease and grant a signed token of sandbox `sandboxId` opens. Throws `preview.url_invalid`,
   * `preview.url_expired` (401; also `url_invalid` when `port` is given and the token is for
   * another), `lease.not_found` (the sandbox is gone from the records), the `usable` refusals
   * (`lease.expired`, `lease.released`, `lease.paused`...) and `preview.port_denied`.
   */
  async grantOf(sandboxId: string, token: string, port?: number): Promise<{ lease: LeaseRecord; grant: PreviewGrant }> {
    const grant = verifyPreviewToken(this.deps.key, sandboxId, token, this.deps.now());
    if (port !== undefined && port !== grant.port)
      throw new AppError('preview.url_invalid', 'the preview token was minted for another port');
    const lease = this.deps.leases.usable(await this.deps.leases.visible(grant.sandboxId, SIGNED_URL_PRINCIPAL));
    this.authorize(lease, grant.port);
    return { lease, grant };
  }

  /** Opens a tunnel to `port` in the sandbox (tunnel.ts `open`: its errors). */
  open(lease: LeaseRecord, port: number): Promise<Tunnel> {
    return this.deps.tunnels.open(lease.id, port);
  }

  /** A pipelined open of `port` (tunnel.ts `openEarly`), or null when none is possible now. */
  openEarly(lease: LeaseRecord, port: number): Promise<EarlyTunnel | null> {
    return this.deps.tunnels.openEarly(lease.id, port);
  }

  /** Appends to the preview log; a failure is logged, never thrown. */
  async record(leaseId: string, event: PreviewEvent): Promise<void> {
    try {
      await this.deps.log.append(leaseId, event);
    } catch (err) {
      this.deps.warn({ err, sandboxId: leaseId }, 'preview log append failed');
    }
  }

  /** The newest `limit` preview events of a lease (oldest first) and how many were dropped. */
  read(leaseId: string, limit: number): Promise<{ events: PreviewEvent[]; dropped: number }> {
    return this.deps.log.read(leaseId, limit);
  }

  /** The preview host's parts, when host-based routing is on and `host` is a preview host. */
  hostTarget(host: string | undefined): { port: number; sandboxId: string } | null {
    const domain = this.deps.domain;
    if (domain === null || host === undefined) return null;
    const lower = host.toLowerCase();
    const suffix = `.${domain.toLowerCase()}`;
    if (!lower.endsWith(suffix)) return null;
    return parseHostLabel(host.slice(0, host.length - suffix.length));
  }
}

/** The query parameter of a host-based signed URL (the first visit moves it into a cookie). */
export const PREVIEW_TOKEN_PARAM = 'sbx_preview_token';
