/**
 * Reconcile: makes the runtime and the lease records agree. Runs at start and then
 * periodically, in every control-plane process at once (each change is a compare-and-swap, so
 * they do not repeat each other's work).
 */
import { TERMINAL_LEASE_STATUSES } from '../../contract/objects.js';
import type { AgentAcl } from '../agent-link/acl.js';
import type { ReturnsIn } from '../agent-link/returns-in.js';
import type { EgressProxy } from '../egress/proxy.js';
import type { WarmPools } from '../pools/warm-pools.js';
import type { QuotaService } from '../quotas/service.js';
import type { DurableTimers } from '../redis/timers.js';
import type { OwnedSandbox, Ownership, SandboxRuntime } from '../runtime/runtime.js';
import type { LeaseEnder } from './ending.js';
import type { LeaseLink } from './ports.js';
import type { Provisioner } from './provision.js';
import type { LeaseRecord, LeaseStore } from './store.js';
import type { Teardown } from './teardown.js';
import type { LeaseTransitions } from './transitions.js';

/** What one reconcile run did, by lease id. */
export interface ReconcileOutcome {
  /** Ready leases with a running container, whose returns (and egress) this process now serves if no live process did. */
  adopted: string[];
  /** Leases whose container, volumes or network were removed: no lease record, or an ended lease's leftovers. */
  removed: string[];
  /** Ready leases whose container is gone or stopped, now `lost`. */
  lost: string[];
  /** Creates whose control-plane process died, now `failed` (`create_interrupted`). */
  failed: string[];
  /** Releases whose control-plane process died, finished here. */
  resumed: string[];
}

export interface ReconcilerDeps {
  runtime: Pick<SandboxRuntime, 'listOwned' | 'pause' | 'unpause'>;
  store: Pick<LeaseStore, 'getLease' | 'listLeases'>;
  transitions: LeaseTransitions;
  ender: Pick<LeaseEnder, 'begin' | 'finish' | 'resume' | 'isAlive' | 'closeRecords'>;
  teardown: Pick<Teardown, 'reap'>;
  provisioner: Pick<Provisioner, 'attach'>;
  returns: Pick<ReturnsIn, 'active'>;
  acl: Pick<AgentAcl, 'leases'>;
  link: Pick<LeaseLink, 'stop' | 'destroy'>;
  egress: Pick<EgressProxy, 'stop'>;
  expiry: Pick<DurableTimers, 'ensure'>;
  quotas: Pick<QuotaService, 'release'>;
  /** Warm pools, whose unleased sandboxes are theirs to look after. */
  pools?: Pick<WarmPools, 'owns'>;
  /**
   * Told as soon as a run has decided a lease is lost (before its teardown, so before anyone can
   * read it `lost`): metrics count it here rather than from the run's outcome.
   */
  onLost?: (leaseId: string) => void;
}

export class Reconciler {
  constructor(
    private readonly deps: ReconcilerDeps,
    private readonly ownership: Ownership,
  ) {}

  /**
   * One run. What it finds, by lease, among what carries this owner and installation id
   * (another installation's sandboxes, and those made before installation ids, are never
   * listed, so never reaped):
   * - container, volumes or network but no lease record, or an ended lease → removed (`lease.reap`);
   * - `pending`/`starting` whose process is gone → `failed` (`create_interrupted`), leftovers removed;
   * - `ready` or `paused` with a running container → adopted: its returns consumed (and its
   *   egress served) when no live process does, its expiry timer ensured (one past due fires at
   *   once), and the container frozen or thawed to match the record (the record is the truth: a
   *   pause or resume cut short between its record and the engine is finished here);
   * - `ready` or `paused` whose container is gone or stopped → `lost`, open calls `effect_unknown`;
   * - `releasing` whose process is gone → the release finished here.
   * Also stops consuming returns of leases others ended, and deletes agent ACL users of ended leases.
   */
  async run(): Promise<ReconcileOutcome> {
    const { runtime, store, teardown } = this.deps;
    const result: ReconcileOutcome = { adopted: [], removed: [], lost: [], failed: [], resumed: [] };
    const owned = await runtime.listOwned(this.ownership);
    for (const sandbox of owned) {
      const lease = await store.getLease(sandbox.leaseId);
      // A warm pool's sandbox has no lease until one claims it; the pool looks after it.
      if (!lease && (await this.pooled(sandbox.leaseId))) continue;
      if (lease && !TERMINAL_LEASE_STATUSES.has(lease.status)) {
        await this.reconcileLease(lease, sandbox, result);
      } else {
        await teardown.reap(sandbox.leaseId, lease, lease ? 'lease_ended' : 'no_lease');
        result.removed.push(sandbox.leaseId);
      }
    }
    const listed = new Set(owned.map((s) => s.leaseId));
    const unlisted = (await store.listLeases()).filter(
      (l) => l.owner === this.ownership.owner && !listed.has(l.id) && !TERMINAL_LEASE_STATUSES.has(l.status),
    );
    if (unlisted.length > 0) {
      // Listed again after the records were read: a lease that became ready after the first
      // listing has its container in this one, and is not taken for lost.
      const present = new Set((await runtime.listOwned(this.ownership)).map((s) => s.leaseId));
      for (const lease of unlisted) if (!present.has(lease.id)) await this.reconcileLease(lease, null, result);
    }
    // Returns this process consumes of leases another process ended go too.
    for (const leaseId of this.deps.returns.active()) {
      if (await this.ended(leaseId)) {
        await this.deps.link.stop(leaseId);
        await this.deps.egress.stop(leaseId);
      }
    }
    for (const leaseId of await this.deps.acl.leases()) {
      if (await this.ended(leaseId)) await this.deps.link.destroy(leaseId);
    }
    return result;
  }

  /** Whether lease `id` has ended or has no record (and is no warm pool's sandbox either). */
  private async ended(id: string): Promise<boolean> {
    const lease = await this.deps.store.getLease(id);
    if (!lease && (await this.pooled(id))) return false;
    return !lease || TERMINAL_LEASE_STATUSES.has(lease.status);
  }

  private async pooled(id: string): Promise<boolean> {
    return (await this.deps.pools?.owns(id)) ?? false;
  }

  private async reconcileLease(lease: LeaseRecord, sandbox: OwnedSandbox | null, result: ReconcileOutcome): Promise<void> {
    const { ender } = this.deps;
    switch (lease.status) {
      case 'pending':
      case 'starting':
        if (await ender.isAlive(lease.inProgressBy)) return;
        if (await this.failInterrupted(lease)) result.failed.push(lease.id);
        return;
      case 'releasing':
        if (await ender.isAlive(lease.inProgressBy)) return;
        if (await ender.resume(lease)) result.resumed.push(lease.id);
        return;
      case 'ready':
      case 'paused': {
        if (sandbox?.running) {
          // A paused lease's container stays frozen; a ready one's runs. Never lost for being frozen.
          if (lease.status === 'paused' && !sandbox.paused) await this.deps.runtime.pause(lease.id);
          if (lease.status === 'ready' && sandbox.paused) await this.deps.runtime.unpause(lease.id);
          await this.deps.provisioner.attach(lease.id, lease.policySnapshot, lease.secrets);
          await this.deps.expiry.ensure(lease.id, Date.parse(lease.expiresAt));
          result.adopted.push(lease.id);
          return;
        }
        const begun = await ender.begin(lease.id, sandbox?.containerId ? 'container_exited' : 'container_missing', 'system', 0);
        if (!begun.applied) return;
        this.deps.onLost?.(lease.id);
        await ender.finish(begun.lease);
        result.lost.push(lease.id);
        return;
      }
      default:
        return;
    }
  }

  /**
   * Fails a create whose process died: `failed` first (one process wins), then its leftovers
   * go; a crash in between leaves an ended lease with leftovers, which the next reconcile
   * reaps. True when this call failed it.
   */
  private async failInterrupted(lease: LeaseRecord): Promise<boolean> {
    const failed = await this.deps.transitions.apply(lease.id, { type: 'fail_interrupted', holder: lease.inProgressBy });
    if (!failed.applied) return false;
    await this.deps.teardown.reap(lease.id, failed.lease, 'create_interrupted');
    await this.deps.ender.closeRecords(lease.id);
    await this.deps.quotas.release(lease.id);
    return true;
  }
}
