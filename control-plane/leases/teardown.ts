/**
 * Teardown: removes everything a lease holds in the runtime, Redis and the data dir. Idempotent;
 * every step runs even when one fails, and the failures are returned.
 */
import { rm } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { CallsOut } from '../agent-link/calls-out.js';
import type { ReturnsIn } from '../agent-link/returns-in.js';
import type { AuditLog } from '../audit/service.js';
import type { EgressProxy } from '../egress/proxy.js';
import type { Ownership, SandboxRuntime } from '../runtime/runtime.js';
import type { VolumeService } from '../volumes/service.js';
import { leaseDirs } from './plan.js';
import type { LeaseCalls, LeaseLink } from './ports.js';
import type { LeaseRecord, LeaseStore } from './store.js';

export interface TeardownDeps {
  runtime: Pick<SandboxRuntime, 'remove'>;
  returns: Pick<ReturnsIn, 'drain'>;
  agentCalls: Pick<CallsOut, 'attemptOf'>;
  link: Pick<LeaseLink, 'destroy'>;
  calls: Pick<LeaseCalls, 'abandonOpenCalls'>;
  egress: Pick<EgressProxy, 'stop'>;
  store: Pick<LeaseStore, 'claimOnce'>;
  audit: Pick<AuditLog, 'record'>;
  /** Persistent volumes: the lease's holds (writer locks) go once its container is gone; the volumes stay. */
  volumes?: Pick<VolumeService, 'release'>;
  log: Logger;
}

/** How long a teardown waits for the returns the agent sent before it stopped to be ledgered, ms. */
const DRAIN_TIMEOUT_MS = 5000;

export class Teardown {
  constructor(
    private readonly deps: TeardownDeps,
    private readonly options: { ownership: Ownership; dataDir: string },
  ) {}

  /**
   * Removes everything the lease holds, in order: the container (so the agent stops), the
   * returns still in flight (so results the agent sent are ledgered), open calls (finished as
   * `cancelled` if no attempt started, else `effect_unknown`), the queues and ACL user, the
   * egress proxy, the credentials. Every step runs; failures are returned.
   */
  async run(id: string, manifestDigest: string | null): Promise<unknown[]> {
    const { runtime, returns, agentCalls, link, calls, egress } = this.deps;
    const dirs = leaseDirs(this.options.dataDir, id);
    const failures: unknown[] = [];
    const step = async (fn: () => Promise<unknown>): Promise<void> => {
      try {
        await fn();
      } catch (err) {
        failures.push(err);
      }
    };
    await step(() => runtime.remove(id, this.options.ownership));
    // Only once the container is gone: until then it may still write. A hold of an ended lease is void anyway.
    if (failures.length === 0) await step(async () => this.deps.volumes?.release(id));
    await step(() => returns.drain(id, DRAIN_TIMEOUT_MS));
    await step(() => calls.abandonOpenCalls(id, manifestDigest, (callId) => agentCalls.attemptOf(id, callId)));
    await step(() => link.destroy(id));
    await step(() => egress.stop(id));
    await step(() => rm(dirs.egress, { recursive: true, force: true }));
    await step(() => rm(dirs.previews, { recursive: true, force: true }));
    await step(() => rm(dirs.credentials, { recursive: true, force: true }));
    await step(() => rm(dirs.trust, { recursive: true, force: true }));
    await step(() => rm(dirs.egressCa, { recursive: true, force: true }));
    return failures;
  }

  /**
   * Removes what a lease left in the runtime and Redis (container, volumes, network, queues,
   * credentials) and records it once in the audit log as `lease.reap` by `system`.
   */
  async reap(leaseId: string, lease: LeaseRecord | null, reason: 'no_lease' | 'lease_ended' | 'create_interrupted'): Promise<void> {
    const failures = await this.run(leaseId, lease?.manifest?.digest ?? null);
    if (failures.length > 0) {
      this.deps.log.warn({ leaseId, failures: failures.map(String) }, 'reaping a sandbox was incomplete; the next reconcile tries again');
      return;
    }
    if (!(await this.deps.store.claimOnce(`reap:${leaseId}`, 300))) return;
    await this.deps.audit.record({
      actor: 'system',
      action: 'lease.reap',
      target: `lease:${leaseId}`,
      beforeDigest: lease?.manifest?.digest ?? null,
      afterDigest: null,
      details: { reason, status: lease?.status ?? null },
    });
    this.deps.log.info({ leaseId, reason }, 'removed what a sandbox left behind');
  }
}
