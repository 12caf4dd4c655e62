/**
 * Policies as versioned, audited records: seeded from `policies/` at start, then read, PUT
 * (a new version) and deleted (tombstoned) by admins. A lease keeps the exact version it was
 * created with (its own snapshot and digest), so nothing here ever changes a running lease.
 */
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import type { PolicyRef } from '../../contract/objects.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';
import { policyRef, validatePolicy, type Policy, type PolicyHead, type PolicyIssue, type PolicyVersion } from './schema.js';
import type { RedisPolicyStore } from './store.js';

export interface PolicyServiceDeps {
  store: Pick<RedisPolicyStore, 'head' | 'heads' | 'version' | 'versions' | 'swap'>;
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
}

/** How often a PUT without `version` re-reads and retries when another write took its version number. */
const PUT_ATTEMPTS = 5;

const BodyVersion = z.number().int().positive().optional();

export class PolicyService {
  constructor(private readonly deps: PolicyServiceDeps) {}

  /**
   * Imports policy files (validated by `readPolicyFiles`) into the store: a file is imported
   * when the store has no such policy or the file's version is above the stored latest (also
   * over a deleted one: shipping a new version brings it back). Imports are audited as
   * `policy.seed` by `system`. Returns what was imported. Safe beside another process seeding.
   */
  async seed(files: Policy[]): Promise<PolicyRef[]> {
    const imported: PolicyRef[] = [];
    for (const policy of [...files].sort((a, b) => a.name.localeCompare(b.name) || a.version - b.version)) {
      for (;;) {
        const current = await this.deps.store.head(policy.name);
        if (current && current.head.latest >= policy.version) break;
        const record = this.versionRecord(policy, 'system');
        if (!(await this.deps.store.swap(current, this.headOf(record), record))) continue;
        await this.deps.audit.record({
          actor: 'system',
          action: 'policy.seed',
          target: `policy:${policy.name}`,
          beforeDigest: current && current.head.deletedAt === null ? current.head.digest : null,
          afterDigest: record.digest,
          details: { version: record.version },
        });
        imported.push(policyRef(policy));
        break;
      }
    }
    return imported;
  }

  /**
   * What a new lease binds to: the latest version of `name`, or exactly `version`. Throws
   * `policy.not_found` for an unknown or deleted policy, or an unknown version, with the names
   * a lease may use in `details.known`.
   */
  async resolve(name: string, version?: number): Promise<{ policy: Policy; ref: PolicyRef }> {
    const current = await this.deps.store.head(name);
    const record = current && current.head.deletedAt === null ? await this.deps.store.version(name, version ?? current.head.latest) : null;
    if (!record) {
      const known = (await this.deps.store.heads())
        .filter((h) => h.deletedAt === null)
        .map((h) => h.name)
        .sort();
      throw this.notFound(name, version, current?.head, { known });
    }
    return { policy: record.policy, ref: { name, version: record.version, digest: record.digest } };
  }

  /** The current version of every policy that is not deleted, by name. */
  async list(): Promise<PolicyVersion[]> {
    const heads = (await this.deps.store.heads()).filter((h) => h.deletedAt === null).sort((a, b) => a.name.localeCompare(b.name));
    const versions = await Promise.all(heads.map((h) => this.deps.store.version(h.name, h.latest)));
    return versions.filter((v): v is PolicyVersion => v !== null);
  }

  /** The current version of `name`. Throws `policy.not_found` (also when deleted). */
  async current(name: string): Promise<PolicyVersion> {
    const current = await this.deps.store.head(name);
    const record = current && current.head.deletedAt === null ? await this.deps.store.version(name, current.head.latest) : null;
    if (!record) throw this.notFound(name, undefined, current?.head);
    return record;
  }

  /** Every version of `name`, oldest first, with its head (deleted or not). Throws `policy.not_found` for a name never stored. */
  async history(name: string): Promise<PolicyHead & { versions: PolicyVersion[] }> {
    const current = await this.deps.store.head(name);
    if (!current) throw this.notFound(name);
    return { ...current.head, versions: await this.deps.store.versions(name) };
  }

  /** Exactly version `version` of `name`, deleted policies included (history stays readable). Throws `policy.not_found`. */
  async version(name: string, version: number): Promise<PolicyVersion> {
    const record = await this.deps.store.version(name, version);
    if (!record) throw this.notFound(name, version);
    return record;
  }

  /**
   * Stores `body` as the next version of `name` (latest + 1, or 1; a deleted policy comes back
   * with the next number). `body.name` may be left out and must be `name` when given;
   * `body.version` may be left out (the server assigns it) and when given must be that next
   * version, which makes it a compare-and-swap. Returns the new version and whether the policy
   * was created (or revived) rather than changed.
   *
   * Throws `policy.invalid` (400) with `details.issues` listing every problem with its path,
   * and `policy.version_conflict` (409) when `body.version` is not the next version.
   */
  async put(name: string, body: unknown, by: Principal): Promise<{ version: PolicyVersion; created: boolean }> {
    const issues: PolicyIssue[] = [];
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new AppError('policy.invalid', 'the body must be a policy: a JSON object', {
        details: { issues: [{ path: '', message: 'expected an object' }] },
      });
    }
    const given = body as Record<string, unknown>;
    if (given.name !== undefined && given.name !== name)
      issues.push({ path: 'name', message: `must be "${name}" (the name in the URL) or left out` });
    const bodyVersion = BodyVersion.safeParse(given.version);
    if (!bodyVersion.success) issues.push({ path: 'version', message: 'must be a positive integer (the next version) or left out' });
    // The version number does not enter any rule: validate with a placeholder, assign it below.
    const result = validatePolicy({ ...given, name, version: 1 });
    if (!result.ok) issues.push(...result.issues);
    if (issues.length > 0 || !result.ok) {
      throw new AppError('policy.invalid', `policy ${name} is invalid: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, {
        details: { issues },
      });
    }
    const expected = bodyVersion.data;
    for (let attempt = 1; ; attempt += 1) {
      const current = await this.deps.store.head(name);
      const next = (current?.head.latest ?? 0) + 1;
      if ((expected !== undefined && expected !== next) || attempt > PUT_ATTEMPTS) {
        throw new AppError(
          'policy.version_conflict',
          `policy ${name}: the next version is ${next}${expected !== undefined ? `, not ${expected}` : ''}`,
          {
            details: { expected: next, given: expected ?? null },
          },
        );
      }
      const record = this.versionRecord({ ...result.policy, version: next }, by.keyId);
      if (!(await this.deps.store.swap(current, this.headOf(record), record))) continue;
      const live = current !== null && current.head.deletedAt === null;
      await this.deps.audit.record({
        actor: actorOf(by),
        action: 'policy.put',
        target: `policy:${name}`,
        beforeDigest: live ? current.head.digest : null,
        afterDigest: record.digest,
        details: { version: next, previousVersion: live ? current.head.latest : null },
      });
      return { version: record, created: !live };
    }
  }

  /**
   * Deletes (tombstones) `name`: new leases naming it get `policy.not_found`; running leases
   * keep their version; its versions stay readable; a later PUT revives it with the next
   * version. Deleting a deleted policy returns its head unchanged. Throws `policy.not_found`
   * for a name never stored.
   */
  async delete(name: string, by: Principal): Promise<PolicyHead> {
    for (;;) {
      const current = await this.deps.store.head(name);
      if (!current) throw this.notFound(name);
      if (current.head.deletedAt !== null) return current.head;
      const deleted: PolicyHead = { ...current.head, deletedAt: this.deps.now().toISOString(), deletedBy: by.keyId };
      if (!(await this.deps.store.swap(current, deleted))) continue;
      await this.deps.audit.record({
        actor: actorOf(by),
        action: 'policy.delete',
        target: `policy:${name}`,
        beforeDigest: current.head.digest,
        afterDigest: null,
        details: { version: current.head.latest },
      });
      return deleted;
    }
  }

  private versionRecord(policy: Policy, createdBy: string): PolicyVersion {
    const ref = policyRef(policy);
    return { name: ref.name, version: ref.version, digest: ref.digest, createdAt: this.deps.now().toISOString(), createdBy, policy };
  }

  private headOf(record: PolicyVersion): PolicyHead {
    return { name: record.name, latest: record.version, digest: record.digest, deletedAt: null, deletedBy: null };
  }

  private notFound(name: string, version?: number, head?: PolicyHead, extra: Record<string, unknown> = {}): AppError {
    const what = version === undefined ? `no policy named ${name}` : `no policy ${name} version ${version}`;
    return new AppError('policy.not_found', head?.deletedAt ? `policy ${name} was deleted` : what, {
      details: { name, version: version ?? null, deletedAt: head?.deletedAt ?? null, ...extra },
    });
  }
}
