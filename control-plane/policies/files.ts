/**
 * The policy files under `policies/` (one YAML file per policy version): read and validated at
 * start-up, then imported into the policy store (see `PolicyService.seed`).
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { AppError } from '../../contract/errors.js';
import { validatePolicy, type Policy } from './schema.js';

/**
 * Every `*.yaml`/`*.yml` of `dir`, validated, sorted by name then version. Throws AppError
 * `policy.invalid` naming the file and each bad field (`details.issues`), or the file that
 * repeats a name and version already defined.
 */
export async function readPolicyFiles(dir: string): Promise<Policy[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith('.yaml') || f.endsWith('.yml')).sort();
  const policies: Policy[] = [];
  for (const file of files) {
    let document: unknown;
    try {
      document = parseYaml(await readFile(join(dir, file), 'utf8'));
    } catch (err) {
      throw new AppError('policy.invalid', `policy file ${file} is not valid YAML: ${(err as Error).message}`, {
        details: { file, issues: [] },
        cause: err,
      });
    }
    const result = validatePolicy(document);
    if (!result.ok) {
      throw new AppError(
        'policy.invalid',
        `policy file ${file} is invalid: ${result.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
        {
          details: { file, issues: result.issues },
        },
      );
    }
    const { name, version } = result.policy;
    if (policies.some((p) => p.name === name && p.version === version)) {
      throw new AppError('policy.invalid', `policy ${name} version ${version} is defined twice (${file})`, {
        details: { file, issues: [{ path: 'version', message: 'defined twice' }] },
      });
    }
    policies.push(result.policy);
  }
  return policies.sort((a, b) => a.name.localeCompare(b.name) || a.version - b.version);
}
