/**
 * A running lease's policy changing in place (issue 16 parts 3 and 4): its next phase
 * (`POST /v1/sandboxes/:id/phase`, forward only) or another version of its policy
 * (`POST /v1/sandboxes/:id/policy`, admin). Only the `network` and `secrets` sections change:
 * the record (compare-and-swap, machine event `change_policy`) gets the new policy and a new
 * manifest, the old one kept in `manifestHistory`; then the egress proxy follows (cutting the
 * connections the old rules let through) and the change is audited. Later calls are decided by
 * the new policy (a withdrawn secret is `policy.secret_denied`); so are calls queued but not
 * started (calls/withdrawn.ts); calls running keep what they had.
 */
import { AppError } from '../../contract/errors.js';
import { digestOf } from '../../contract/digest.js';
import type { EnvironmentManifest, Lease, PolicyRef } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import { policyIntercepts } from '../egress/schema.js';
import { allowlistDigest } from '../egress/rules.js';
import type { Principal } from '../http/auth.js';
import { inPhase, phaseIndex } from '../policies/phases.js';
import type { Policy } from '../policies/schema.js';
import type { PolicyService } from '../policies/service.js';
import type { LeaseCalls, LeaseLink } from './ports.js';
import type { Provisioner } from './provision.js';
import { toView, type LeaseRecord } from './store.js';
import type { LeaseTransitions } from './transitions.js';

export interface PolicyChangeDeps {
  transitions: Pick<LeaseTransitions, 'apply'>;
  policies: Pick<PolicyService, 'resolve'>;
  provisioner: Pick<Provisioner, 'attach'>;
  audit: Pick<AuditLog, 'record'>;
  calls: Pick<LeaseCalls, 'denyWithdrawnSecrets'>;
  link: { calls: Pick<LeaseLink['calls'], 'markWithdrawnSecrets'> };
  /** Throws the lease guard's codes when the lease may not be used now (`lease.released`...). */
  usable: (lease: LeaseRecord) => LeaseRecord;
}

/** Sections a running sandbox takes from a new policy version; every other one must be equal. */
const LIVE_SECTIONS = new Set(['name', 'version', 'description', 'network', 'secrets']);

/** How many times a change is worked out again when another change came first. */
const MAX_TRIES = 3;

export class LeasePolicyChanger {
  constructor(private readonly deps: PolicyChangeDeps) {}

  /**
   * Moves `lease` to its policy's phase `name`. Throws `lease.phase_unknown` (no such phase, or
   * no phases), `lease.phase_behind` (the current phase or an earlier one), the `usable` codes.
   */
  async movePhase(lease: LeaseRecord, name: string, by: Principal): Promise<Lease> {
    return this.change(lease, by, 'phase_moved', (current) => {
      const phases = (current.policySnapshot.phases ?? []).map((p) => p.name);
      const to = phaseIndex(current.policySnapshot, name);
      if (to < 0)
        throw new AppError('lease.phase_unknown', `the sandbox's policy has no phase ${name}`, { details: { phase: name, phases } });
      const from = current.phase === null ? -1 : phaseIndex(current.policySnapshot, current.phase);
      if (to <= from)
        throw new AppError('lease.phase_behind', `the sandbox is in phase ${current.phase}; phases move forward only`, {
          details: { phase: name, current: current.phase, phases },
        });
      return { policy: inPhase(current.policySnapshot, name), ref: current.policy, phase: name };
    });
  }

  /**
   * Moves `lease` to `version` of its policy. Throws `policy.not_found`, `policy.not_live_changeable`
   * (`details.sections`: what differs that cannot change live), the `usable` codes.
   */
  async changePolicy(lease: LeaseRecord, version: number, by: Principal): Promise<Lease> {
    const [next, bound] = await Promise.all([
      this.deps.policies.resolve(lease.policy.name, version),
      this.deps.policies.resolve(lease.policy.name, lease.policy.version),
    ]);
    const sections = fixedSectionsChanged(bound.policy, next.policy);
    if (sections.length > 0)
      throw new AppError(
        'policy.not_live_changeable',
        `version ${version} differs in what a running sandbox cannot change: ${sections.join(', ')}`,
        {
          details: { sections, version },
        },
      );
    return this.change(lease, by, 'policy_changed', (current) => ({
      // The lease's own writable roots (merged into its snapshot at create) stay.
      policy: { ...current.policySnapshot, ...pick(next.policy, LIVE_SECTIONS) } as Policy,
      ref: next.ref,
      phase: current.phase,
    }));
  }

  /**
   * After a change: the agent is told exactly what the lease's policy now withholds (`allowed` lacks),
   * and calls still in the lease's queue that name one end denied here (calls/withdrawn.ts).
   * Returns their ids, or the error that stopped this (the change stands; what was marked before
   * it, a superset, stays in force): written into the audit entry.
   */
  private async withdraw(lease: LeaseRecord, allowed: readonly string[]): Promise<string[] | { error: string }> {
    const withheld = withheldSecrets(lease, allowed);
    try {
      await this.deps.link.calls.markWithdrawnSecrets(lease.id, withheld);
      return withheld.length === 0 ? [] : await this.deps.calls.denyWithdrawnSecrets(lease.id, allowed);
    } catch (err) {
      return { error: (err as Error).message };
    }
  }

  private async change(
    lease: LeaseRecord,
    by: Principal,
    reason: 'policy_changed' | 'phase_moved',
    work: (current: LeaseRecord) => { policy: Policy; ref: PolicyRef; phase: string | null },
  ): Promise<Lease> {
    let current = this.deps.usable(lease);
    for (let tries = 1; ; tries += 1) {
      const { policy, ref, phase } = work(current);
      const before = current.manifest;
      if (before === null) throw new AppError('lease.not_ready', `sandbox ${lease.id} has no manifest yet`);
      const manifest = changedManifest(
        before,
        policy,
        ref,
        phase,
        current.secrets.map((g) => g.name),
      );
      // Fail closed: before the change, the agent is told every secret that either policy
      // withholds; a failure here changes nothing. After it, exactly what the new one withholds.
      const both = current.policySnapshot.secrets.allowed.filter((name) => policy.secrets.allowed.includes(name));
      await this.deps.link.calls.markWithdrawnSecrets(lease.id, withheldSecrets(current, both));
      const applied = await this.deps.transitions.apply(lease.id, {
        type: 'change_policy',
        reason,
        basisDigest: before.digest,
        policy,
        ref,
        phase,
        manifest,
      });
      if (applied.applied) {
        const after = applied.lease!;
        await this.deps.provisioner.attach(after.id, after.policySnapshot, after.secrets);
        const callsDenied = await this.withdraw(after, policy.secrets.allowed);
        await this.deps.audit.record({
          actor: actorOf(by),
          action: reason === 'phase_moved' ? 'lease.phase_move' : 'lease.policy_change',
          target: `lease:${lease.id}`,
          beforeDigest: before.digest,
          afterDigest: manifest.digest,
          details: {
            tenant: after.tenant,
            from: { policy: current.policy, phase: current.phase },
            to: { policy: ref, phase },
            callsDenied,
          },
        });
        return toView(after);
      }
      // Not changed: what the policy in force (another change's, maybe) withholds, again; a
      // failure leaves more withheld, never less.
      const inForce = applied.lease ?? current;
      await this.deps.link.calls
        .markWithdrawnSecrets(lease.id, withheldSecrets(inForce, inForce.policySnapshot.secrets.allowed))
        .catch(() => undefined);
      if (!applied.lease) throw new AppError('lease.not_found', `no sandbox ${lease.id}`, { details: { id: lease.id } });
      current = this.deps.usable(applied.lease);
      if (applied.refusal?.reason !== 'changed' || tries >= MAX_TRIES)
        throw new AppError('lease.not_ready', `sandbox ${lease.id} changed meanwhile; read it and try again`);
    }
  }
}

/** The secrets `lease` was granted that `allowed` does not hold: what its agent must not hand out. */
function withheldSecrets(lease: LeaseRecord, allowed: readonly string[]): string[] {
  return lease.secrets.map((g) => g.name).filter((name) => !allowed.includes(name));
}

/** Top-level sections other than LIVE_SECTIONS where `a` and `b` differ, and interception `b` would need that `a` was made without. */
function fixedSectionsChanged(a: Policy, b: Policy): string[] {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !LIVE_SECTIONS.has(k)).sort();
  const changed = keys.filter(
    (k) => digestOf((a as Record<string, unknown>)[k] ?? null) !== digestOf((b as Record<string, unknown>)[k] ?? null),
  );
  // The network's plumbing (no interface, the proxy's socket, a bridge) is made with the sandbox.
  if (a.network.mode !== b.network.mode) changed.push('network.mode');
  // The lease CA's trust files are mounted when the sandbox is made.
  if (policyIntercepts(b) && !policyIntercepts(a)) changed.push('interception (secrets.inject, network.allow[].http)');
  // A phased sandbox changes by its phases only.
  if ((a.phases ?? b.phases) !== undefined && !changed.includes('phases')) changed.push('phases');
  return changed;
}

function pick<T extends object>(obj: T, keys: ReadonlySet<string>): Partial<T> {
  return Object.fromEntries(Object.entries(obj).filter(([k]) => keys.has(k))) as Partial<T>;
}

/** `manifest` with the policy, network, usable secrets and phase of the change, and its digest made again. */
function changedManifest(
  manifest: EnvironmentManifest,
  policy: Policy,
  ref: PolicyRef,
  phase: string | null,
  granted: string[],
): EnvironmentManifest {
  const { digest: _old, phase: _phase, ...rest } = manifest;
  const body = {
    ...rest,
    policy: ref,
    network: {
      mode: policy.network.mode,
      allowlistDigest: policy.network.mode === 'allowlist' ? allowlistDigest(policy.network.allow) : null,
    },
    secretRefs: granted.filter((name) => policy.secrets.allowed.includes(name)).sort(),
    ...(phase === null ? {} : { phase }),
  };
  return { ...body, digest: digestOf(body) };
}
