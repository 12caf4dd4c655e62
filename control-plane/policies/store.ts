/**
 * Policy store: loads every `*.yaml` under the policy directory, validates each against the
 * policy schema and indexes them by name and version. A lease binds to the exact version it
 * was created with (it keeps a copy), so a later version never changes a running lease.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { AppError } from '../../contract/errors.js';
import { digestOf } from '../../contract/digest.js';
import type { PolicyRef } from '../../contract/objects.js';
import { Policy } from './schema.js';

export interface StoredPolicy {
  ref: PolicyRef;
  policy: Policy;
}

export class PolicyStore {
  private constructor(private readonly byName: Map<string, StoredPolicy[]>) {}

  /**
   * Reads the policy files of `dir`. Throws AppError `policy.invalid` naming the file and the
   * field when one does not validate, or when two files claim the same name and version.
   */
  static async load(dir: string): Promise<PolicyStore> {
    const files = (await readdir(dir)).filter((f) => f.endsWith('.yaml') || f.endsWith('.yml')).sort();
    const byName = new Map<string, StoredPolicy[]>();
    for (const file of files) {
      const text = await readFile(join(dir, file), 'utf8');
      const parsed = Policy.safeParse(parseYaml(text));
      if (!parsed.success) {
        throw new AppError('policy.invalid', `policy file ${file} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, {
          details: { file, issues: parsed.error.issues },
        });
      }
      const stored = PolicyStore.entry(parsed.data);
      const versions = byName.get(stored.ref.name) ?? [];
      if (versions.some((v) => v.ref.version === stored.ref.version)) {
        throw new AppError('policy.invalid', `policy ${stored.ref.name} version ${stored.ref.version} is defined twice (${file})`, { details: { file } });
      }
      versions.push(stored);
      versions.sort((a, b) => a.ref.version - b.ref.version);
      byName.set(stored.ref.name, versions);
    }
    return new PolicyStore(byName);
  }

  /** The policy with its reference (name, version, digest of its canonical JSON). */
  static entry(policy: Policy): StoredPolicy {
    return { ref: { name: policy.name, version: policy.version, digest: digestOf(policy) }, policy };
  }

  /** Latest version of `name`, or exactly `version`. Throws AppError `policy.not_found`. */
  resolve(name: string, version?: number): StoredPolicy {
    const versions = this.byName.get(name);
    const found = version === undefined ? versions?.at(-1) : versions?.find((v) => v.ref.version === version);
    if (!found) {
      throw new AppError('policy.not_found', version === undefined ? `no policy named ${name}` : `no policy ${name} version ${version}`, {
        details: { name, version: version ?? null, known: [...this.byName.keys()] },
      });
    }
    return found;
  }

  /** Every stored policy version, by name then version. */
  list(): StoredPolicy[] {
    return [...this.byName.values()].flat();
  }
}
