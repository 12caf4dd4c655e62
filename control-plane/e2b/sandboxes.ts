/**
 * E2B's control API over sbx leases (issue 17 part 1): a sandbox is a lease, a template is a
 * policy (`base` is sbx's `default`), metadata are labels, `envVars` the lease's env, `timeout`
 * its TTL in seconds. The envd access token handed out with a sandbox is a signed grant
 * (http/signed-urls.ts, purpose `e2b-envd`) bound to the sandbox and the key that leased it.
 */
import { AppError } from '../../contract/errors.js';
import type { Lease } from '../../contract/objects.js';
import type { Principal } from '../http/auth.js';
import { signGrant, verifyGrant, SIGNED_URL_PRINCIPAL } from '../http/signed-urls.js';
import type { LeaseRecord } from '../leases/store.js';
import type { LeaseService } from '../leases/service.js';
import type { SnapshotService } from '../snapshots/service.js';
import { ENVD_VERSION, type NewSandbox } from './schema.js';

/** How long an envd access token is good for, ms: longer than any lease, which ends it first. */
const TOKEN_LIFE_MS = 30 * 24 * 3600_000;
/** The template E2B clients ask for by default, and the policy it means. */
const DEFAULT_TEMPLATE = 'base';
const DEFAULT_POLICY = 'default';
/** The id prefix of sbx snapshots: a template that starts with it starts from that snapshot. */
const SNAPSHOT_PREFIX = 'snap_';

export interface E2bSandboxesDeps {
  leases: Pick<LeaseService, 'create' | 'visible' | 'list' | 'renew' | 'release' | 'pause' | 'resume' | 'usable'>;
  /** Snapshots are templates to E2B clients: `snap_…` ids go where a template name does. */
  snapshots: Pick<SnapshotService, 'capture' | 'list' | 'delete'>;
  /** The signing key of envd access tokens (the installation's signed-URL key). */
  tokenKey: Buffer;
  /** The preview domain (`SBX_PREVIEW_DOMAIN`): the SDK's `getHost(port)` is `<port>-<id>.<it>`. */
  previewDomain: string | null;
  now: () => Date;
}

/** E2B's `Sandbox` (create and connect answers). */
export interface E2bSandbox {
  sandboxID: string;
  templateID: string;
  alias: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  domain: string | null;
  trafficAccessToken: null;
}

/** E2B's `ListedSandbox` / `SandboxDetail`. */
export interface E2bSandboxInfo {
  sandboxID: string;
  templateID: string;
  alias: string;
  clientID: string;
  startedAt: string;
  endAt: string;
  state: 'running' | 'paused';
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata: Record<string, string>;
  envdVersion: string;
  domain: string | null;
}

/** The template a lease answers to: its policy's name, `base` for sbx's default. */
const templateOf = (lease: Pick<Lease, 'policy'>): string => (lease.policy.name === DEFAULT_POLICY ? DEFAULT_TEMPLATE : lease.policy.name);

/** A lease's state as E2B names it; null for a lease that is not (or no longer) a sandbox E2B shows. */
function stateOf(status: Lease['status']): 'running' | 'paused' | null {
  return status === 'ready' ? 'running' : status === 'paused' ? 'paused' : null;
}

export class E2bSandboxes {
  constructor(private readonly deps: E2bSandboxesDeps) {}

  /**
   * Leases a sandbox of `body.templateID`'s policy. Throws AppError `policy.not_found` (an
   * unknown template), `input.invalid` (metadata that are not labels), and whatever a lease create
   * throws (quota, capacity).
   */
  async create(body: NewSandbox, by: Principal): Promise<E2bSandbox> {
    const fromSnapshot = body.templateID.startsWith(SNAPSHOT_PREFIX);
    const policy = body.templateID === DEFAULT_TEMPLATE ? DEFAULT_POLICY : body.templateID;
    const metadata = body.metadata ?? {};
    const reserved = Object.keys(metadata).find((k) => k.startsWith('sbx.'));
    if (reserved !== undefined) throw new AppError('input.invalid', `metadata key ${reserved}: keys starting with "sbx." are reserved`);
    const { lease } = await this.deps.leases.create(
      {
        ...(fromSnapshot ? { snapshot: body.templateID } : { policy }),
        ...(body.timeout !== undefined ? { ttlSeconds: body.timeout } : {}),
        ...(body.envVars ? { env: body.envVars } : {}),
        labels: metadata,
      },
      by,
    );
    return this.sandboxOf(lease, by);
  }

  /** Connects to sandbox `id`: resumes it when paused (`resumed`), renews its TTL to `timeoutSeconds` when given. Throws `lease.not_found`. */
  async connect(id: string, by: Principal, timeoutSeconds?: number): Promise<{ sandbox: E2bSandbox; resumed: boolean }> {
    let lease: Lease | LeaseRecord = await this.running(id, by);
    const resumed = lease.status === 'paused';
    if (resumed) lease = await this.deps.leases.resume(id, by);
    if (timeoutSeconds !== undefined) lease = await this.deps.leases.renew(id, by, timeoutSeconds);
    return { sandbox: this.sandboxOf(lease, by), resumed };
  }

  /** The running and paused sandboxes `by` may see, filtered by metadata (all must match) and state. */
  async list(by: Principal, filter: { metadata: Record<string, string>; states: Set<string> | null }): Promise<E2bSandboxInfo[]> {
    const out: E2bSandboxInfo[] = [];
    for (const lease of await this.deps.leases.list(by)) {
      const state = stateOf(lease.status);
      if (state === null || (filter.states !== null && !filter.states.has(state))) continue;
      if (!Object.entries(filter.metadata).every(([k, v]) => lease.labels[k] === v)) continue;
      out.push(this.infoOf(await this.deps.leases.visible(lease.id, by)));
    }
    return out;
  }

  /** Sandbox `id` as E2B details it. Throws `lease.not_found` (also once it ended). */
  async info(id: string, by: Principal): Promise<E2bSandboxInfo> {
    return this.infoOf(await this.running(id, by));
  }

  /** Sets sandbox `id`'s remaining life to `seconds` from now (a lease renew). */
  async setTimeout(id: string, by: Principal, seconds: number): Promise<void> {
    await this.running(id, by);
    await this.deps.leases.renew(id, by, seconds);
  }

  /** Kills sandbox `id` (a lease release). Throws `lease.not_found` for one that is gone. */
  async kill(id: string, by: Principal): Promise<void> {
    await this.running(id, by);
    await this.deps.leases.release(id, by);
  }

  /** Pauses sandbox `id`; false when it was paused already. */
  async pause(id: string, by: Principal): Promise<boolean> {
    const lease = await this.running(id, by);
    if (lease.status === 'paused') return false;
    await this.deps.leases.pause(id, by);
    return true;
  }

  /** A snapshot of sandbox `id` (sbx's capture: its image's changes and writable roots); its id is a template for `create`. */
  async createSnapshot(id: string, by: Principal): Promise<{ snapshotID: string; names: string[] }> {
    await this.running(id, by);
    const snapshot = await this.deps.snapshots.capture(id, by);
    return { snapshotID: snapshot.id, names: [] };
  }

  /** The snapshots `by` may see, of sandbox `sandboxId` when given, newest first. */
  async listSnapshots(by: Principal, sandboxId: string | undefined): Promise<Array<{ snapshotID: string; names: string[] }>> {
    const all = await this.deps.snapshots.list(by);
    return all.filter((s) => sandboxId === undefined || s.parentLeaseId === sandboxId).map((s) => ({ snapshotID: s.id, names: [] }));
  }

  /** Deletes snapshot `id` (E2B's `DELETE /templates/:id`). Throws `snapshot.not_found`, and `lease.not_found` for a template that is not a snapshot. */
  async deleteSnapshot(id: string, by: Principal): Promise<void> {
    if (!id.startsWith(SNAPSHOT_PREFIX)) throw new AppError('lease.not_found', `${id} is not a snapshot; templates are sbx policies`);
    await this.deps.snapshots.delete(id, by);
  }

  /**
   * The lease an envd request with access token `token` for sandbox `sandboxId` reaches: usable
   * now. Throws `envd.token_invalid`, `envd.token_expired` (401), `lease.not_found`, and the
   * lease guard's refusals (paused, ended).
   */
  async envdLease(sandboxId: string, token: string | undefined): Promise<LeaseRecord> {
    if (!token) throw new AppError('envd.token_invalid', 'send the X-Access-Token the sandbox was created or connected with');
    verifyGrant(this.deps.tokenKey, 'e2b-envd', sandboxId, '', token, this.deps.now());
    // The token binds the sandbox id (minted for a key that could see it): the lookup needs no tenant.
    return this.deps.leases.usable(await this.deps.leases.visible(sandboxId, SIGNED_URL_PRINCIPAL));
  }

  /** The lease of `id` while it is a running or paused sandbox; `lease.not_found` otherwise (E2B's 404 for a killed one too). */
  private async running(id: string, by: Principal): Promise<LeaseRecord> {
    const lease = await this.deps.leases.visible(id, by);
    if (stateOf(lease.status) === null) throw new AppError('lease.not_found', `no sandbox ${id}`, { details: { id } });
    return lease;
  }

  private sandboxOf(lease: Lease | LeaseRecord, by: Principal): E2bSandbox {
    const expiresAt = new Date(this.deps.now().getTime() + TOKEN_LIFE_MS);
    return {
      sandboxID: lease.id,
      templateID: templateOf(lease),
      alias: templateOf(lease),
      clientID: 'sbx',
      envdVersion: ENVD_VERSION,
      envdAccessToken: signGrant(this.deps.tokenKey, 'e2b-envd', { sandboxId: lease.id, subject: '', expiresAt, keyId: by.keyId }),
      domain: this.deps.previewDomain,
      trafficAccessToken: null,
    };
  }

  private infoOf(lease: LeaseRecord): E2bSandboxInfo {
    const { cpus, memoryBytes } = lease.policySnapshot.resources;
    return {
      sandboxID: lease.id,
      templateID: templateOf(lease),
      alias: templateOf(lease),
      clientID: 'sbx',
      startedAt: lease.createdAt,
      endAt: lease.expiresAt,
      state: stateOf(lease.status) ?? 'running',
      cpuCount: Math.max(1, Math.ceil(cpus)),
      memoryMB: Math.round(memoryBytes / (1024 * 1024)),
      diskSizeMB: 0,
      metadata: lease.labels,
      envdVersion: ENVD_VERSION,
      domain: this.deps.previewDomain,
    };
  }
}
