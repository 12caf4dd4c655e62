/**
 * From denial to proposal to approval (issue 16 part 5): `GET /v1/policies/:name/proposals`
 * reads the denied egress events of the policy's leases (any version, any tenant, as long as
 * their egress logs are kept) and proposes the smallest allowlist change (proposals.ts);
 * `POST .../proposals/accept {version}` writes it as the next version — a compare-and-swap on
 * the version the admin reviewed — and audits it.
 */
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import type { EgressEvent, PolicyRef } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import { propose, type Proposal } from './proposals.js';
import type { PolicyVersion } from './schema.js';
import type { PolicyService } from './service.js';

export interface ProposalDeps {
  policies: Pick<PolicyService, 'resolve' | 'put'>;
  /** Lease records, newest first (the store's bounded list). */
  leases: { listLeases(limit?: number): Promise<ReadonlyArray<{ id: string; policy: PolicyRef }>> };
  egress: { read(leaseId: string): Promise<{ events: EgressEvent[] }> };
  audit: Pick<AuditLog, 'record'>;
}

/** A proposal as the API shows it: for which version, the changes, what is not proposed, and the next policy. */
export interface ProposalView extends Proposal {
  policy: PolicyRef;
  /** Digest of the changes and the proposed policy: accept names it, so what is written is what was reviewed. */
  digest: string;
  /** Leases whose egress logs were read. */
  leasesRead: number;
}

/** Leases read per proposal (the newest). */
const LEASES_READ = 1000;

export class ProposalService {
  constructor(private readonly deps: ProposalDeps) {}

  /** The proposal for policy `name` now. Throws `policy.not_found`. */
  async proposal(name: string): Promise<ProposalView> {
    const { policy, ref } = await this.deps.policies.resolve(name);
    const leases = (await this.deps.leases.listLeases(LEASES_READ)).filter((l) => l.policy.name === name);
    const denials = (
      await Promise.all(
        leases.map(async (lease) =>
          (await this.deps.egress.read(lease.id)).events
            .filter((e) => e.decision === 'denied')
            .map((event) => ({ leaseId: lease.id, event })),
        ),
      )
    ).flat();
    const proposal = propose(policy, denials);
    const digest = digestOf({ changes: proposal.changes.map(({ evidence: _e, ...c }) => c), proposed: proposal.proposed });
    return { policy: ref, leasesRead: leases.length, digest, ...proposal };
  }

  /**
   * Writes the proposal as version `reviewed` + 1 of `name`. Throws `policy.version_conflict`
   * when `reviewed` is not the latest version (the proposal the admin saw is stale),
   * `policy.nothing_proposed` when there is no change to make, `policy.not_found`.
   */
  async accept(name: string, reviewed: number, digest: string, by: Principal): Promise<PolicyVersion> {
    const view = await this.proposal(name);
    if (view.policy.version !== reviewed || view.digest !== digest)
      throw new AppError('policy.version_conflict', `policy ${name} or its proposal changed since it was reviewed; review it again`, {
        details: { expected: view.policy.version + 1, given: reviewed + 1, digest: view.digest },
      });
    if (view.changes.length === 0)
      throw new AppError('policy.nothing_proposed', `no denied egress of policy ${name}'s leases calls for a change`);
    const { version } = await this.deps.policies.put(name, { ...view.proposed, version: reviewed + 1 }, by);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'policy.proposal_accept',
      target: `policy:${name}`,
      beforeDigest: view.policy.digest,
      afterDigest: version.digest,
      details: { version: version.version, changes: view.changes.map(({ evidence: _evidence, ...change }) => change) },
    });
    return version;
  }
}
