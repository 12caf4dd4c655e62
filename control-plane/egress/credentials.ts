/**
 * Credential injection of one lease (policy `secrets.inject`, issue 16 part 1), as the lease
 * lifecycle uses it: which granted secrets the sandbox gets as placeholders, the lease CA and
 * its trust files before the sandbox starts, and the interception its egress proxy serves
 * (values revealed here, kept in this process's memory only).
 */
import type { SecretGrant } from '../../contract/queue.js';
import type { Policy } from '../policies/schema.js';
import type { SecretService } from '../secrets/service.js';
import { LeaseCa, writeTrustFiles } from './ca.js';
import { policyIntercepts } from './schema.js';
import { placeholderKey, placeholderOf, type Injection } from './inject.js';
import type { LeaseInterception } from './intercept.js';

export interface CredentialInjectionDeps {
  /** The installation's secrets key: the placeholders' key is derived from it (inject.ts `placeholderKey`). */
  secretsKey: Buffer;
  secrets: Pick<SecretService, 'reveal'>;
}

/** A lease's directories for its CA: `egressCa` (keys, this side only) and `trust` (mounted into the sandbox). */
export interface CaDirs {
  egressCa: string;
  trust: string;
}

export class CredentialInjection {
  private readonly placeholderKey: Buffer;

  constructor(private readonly deps: CredentialInjectionDeps) {
    this.placeholderKey = placeholderKey(deps.secretsKey);
  }

  /** Names among `granted` that `policy` injects: the sandbox holds their placeholders, never their values. */
  static injected(policy: Policy, granted: readonly string[]): string[] {
    const names = new Set((policy.secrets.inject ?? []).map((r) => r.secret));
    return granted.filter((name) => names.has(name));
  }

  /** The placeholder the sandbox of `leaseId` holds for `secret` (inject.ts `placeholderOf`). */
  placeholder(leaseId: string, secret: string): string {
    return placeholderOf(this.placeholderKey, leaseId, secret);
  }

  /** Makes the lease CA (or reopens it) and writes the sandbox's trust files, when `policy`'s proxy intercepts anything (schema.ts `policyIntercepts`). */
  async prepare(leaseId: string, policy: Policy, dirs: CaDirs): Promise<void> {
    if (!policyIntercepts(policy)) return;
    await writeTrustFiles(dirs.trust, await LeaseCa.open(dirs.egressCa, leaseId));
  }

  /**
   * What the lease's egress proxy intercepts with: the lease CA, and the rules of `policy` whose
   * secret was granted, each with its placeholder and value; undefined when the policy
   * intercepts nothing. Throws the secret store's `secret.not_found` and `secret.unreadable`.
   */
  async interception(
    leaseId: string,
    policy: Policy,
    grants: readonly SecretGrant[],
    dirs: CaDirs,
  ): Promise<LeaseInterception | undefined> {
    if (!policyIntercepts(policy)) return undefined;
    const granted = new Set(grants.map((g) => g.name));
    // Granted and allowed now: a phase or policy version that withdrew a secret stops its injection too.
    const rules = (policy.secrets.inject ?? []).filter((r) => granted.has(r.secret) && policy.secrets.allowed.includes(r.secret));
    const values =
      rules.length === 0 ? new Map<string, Buffer>() : await this.deps.secrets.reveal([...new Set(rules.map((r) => r.secret))]);
    const injections: Injection[] = rules.map((rule) => ({
      rule,
      placeholder: this.placeholder(leaseId, rule.secret),
      value: values.get(rule.secret)!.toString('utf8'),
    }));
    return { ca: await LeaseCa.open(dirs.egressCa, leaseId), injections };
  }
}
