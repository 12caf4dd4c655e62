import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parse as parseYaml } from 'yaml';
import { AppError } from '../../contract/errors.js';
import { scratchDir } from '../../test/fixtures/scratch.js';
import { readPolicyFiles } from './files.js';
import { Policy, policyRef, validatePolicy } from './schema.js';

const policiesDir = new URL('../../policies/', import.meta.url).pathname;

describe('policy files', () => {
  it('the shipped policies load; default is network none with a read-only root', async () => {
    const policy = (await readPolicyFiles(policiesDir)).find((p) => p.name === 'default')!;
    expect(policy.network.mode).toBe('none');
    expect(policy.filesystem.readOnlyRoot).toBe(true);
    expect(policyRef(policy).digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('policies/policy.schema.json is the JSON Schema of the policy schema (regenerate: UPDATE_POLICY_SCHEMA=1 npm run test:unit)', async () => {
    const generated = `${JSON.stringify(z.toJSONSchema(Policy, { io: 'input' }), null, 2)}\n`;
    const file = join(policiesDir, 'policy.schema.json');
    if (process.env.UPDATE_POLICY_SCHEMA === '1') await writeFile(file, generated);
    expect(await readFile(file, 'utf8')).toBe(generated);
  });

  it('several versions of one name load in version order; the digest changes with content', async () => {
    const dir = await scratchDir('sbx-pol-');
    const text = await readFile(join(policiesDir, 'default.yaml'), 'utf8');
    await writeFile(
      join(dir, 'a.yaml'),
      text.replace('name: default', 'name: team').replace('version: 1', 'version: 2').replace('pids: 512', 'pids: 256'),
    );
    await writeFile(join(dir, 'b.yaml'), text.replace('name: default', 'name: team'));
    const [v1, v2] = await readPolicyFiles(dir);
    expect([v1!.version, v2!.version]).toEqual([1, 2]);
    expect(v1!.resources.pids).toBe(512);
    expect(policyRef(v1!).digest).not.toBe(policyRef(v2!).digest);
  });

  it('two files with the same name and version are policy.invalid naming the second', async () => {
    const dir = await scratchDir('sbx-pol-');
    const text = await readFile(join(policiesDir, 'default.yaml'), 'utf8');
    await writeFile(join(dir, 'a.yaml'), text);
    await writeFile(join(dir, 'b.yaml'), text);
    await expect(readPolicyFiles(dir)).rejects.toMatchObject({ code: 'policy.invalid', details: { file: 'b.yaml' } });
  });

  it('refuses writable roots that add up to more than the memory limit (they are tmpfs)', async () => {
    const dir = await scratchDir('sbx-pol-');
    const text = await readFile(join(policiesDir, 'default.yaml'), 'utf8');
    await writeFile(join(dir, 'big.yaml'), text.replace('sizeBytes: 1073741824', 'sizeBytes: 4294967296'));
    await expect(readPolicyFiles(dir)).rejects.toMatchObject({
      code: 'policy.invalid',
      message: expect.stringContaining('filesystem.writableRoots'),
    });
  });

  it('an invalid policy file is policy.invalid naming the file and the field', async () => {
    const dir = await scratchDir('sbx-pol-');
    await writeFile(join(dir, 'broken.yaml'), 'name: broken\nversion: 1\nnetwork: { mode: sideways }\n');
    const err = await readPolicyFiles(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('policy.invalid');
    expect((err as AppError).message).toContain('broken.yaml');
    expect((err as AppError).message).toContain('network.mode');
  });
});

describe('validatePolicy', () => {
  const valid = async (): Promise<Record<string, any>> => parseYaml(await readFile(join(policiesDir, 'default.yaml'), 'utf8'));

  it('accepts a shipped policy and fills defaults', async () => {
    const result = validatePolicy(await valid());
    expect(result.ok && result.policy.secrets).toEqual({ allowed: [] });
  });

  it('reports shape faults, unknown fields at their own path, and cross-field faults together', async () => {
    const p = await valid();
    p.network.mode = 'sideways';
    p.resources.cpus = -1;
    p.surprise = true;
    p.resources.ttlSeconds = p.resources.maxTtlSeconds + 1;
    const result = validatePolicy(p);
    expect(result.ok).toBe(false);
    const paths = result.ok ? [] : result.issues.map((i) => i.path).sort();
    expect(paths).toEqual(['network.mode', 'resources.cpus', 'resources.ttlSeconds', 'surprise']);
  });

  it('a cross-field fault alone is one issue; a rule whose fields are mistyped is left to the shape', async () => {
    const p = await valid();
    p.tools.exec.defaultTimeoutMs = p.tools.exec.maxTimeoutMs + 1;
    expect(validatePolicy(p)).toEqual({ ok: false, issues: [{ path: 'tools.exec.defaultTimeoutMs', message: 'must be ≤ maxTimeoutMs' }] });
    p.tools.exec.maxTimeoutMs = 'soon';
    const result = validatePolicy(p);
    expect(result.ok ? [] : result.issues.map((i) => i.path)).toEqual(['tools.exec.maxTimeoutMs']);
  });
});
