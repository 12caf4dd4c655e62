import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { Policy } from './schema.js';
import { PolicyStore } from './store.js';

const policiesDir = new URL('../../policies/', import.meta.url).pathname;

describe('policy store', () => {
  it('loads the shipped policies; default is network none with a read-only root', async () => {
    const store = await PolicyStore.load(policiesDir);
    const { policy, ref } = store.resolve('default');
    expect(policy.network.mode).toBe('none');
    expect(policy.filesystem.readOnlyRoot).toBe(true);
    expect(ref.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('policies/policy.schema.json is the JSON Schema of the policy schema (regenerate: UPDATE_POLICY_SCHEMA=1 npm run test:unit)', async () => {
    const generated = `${JSON.stringify(z.toJSONSchema(Policy, { io: 'input' }), null, 2)}\n`;
    const file = join(policiesDir, 'policy.schema.json');
    if (process.env.UPDATE_POLICY_SCHEMA === '1') await writeFile(file, generated);
    expect(await readFile(file, 'utf8')).toBe(generated);
  });

  it('resolves the latest version by default and an exact version on request; the digest changes with content', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-pol-'));
    const text = await readFile(join(policiesDir, 'default.yaml'), 'utf8');
    await writeFile(join(dir, 'a.yaml'), text.replace('name: default', 'name: team').replace('version: 1', 'version: 1'));
    await writeFile(join(dir, 'b.yaml'), text.replace('name: default', 'name: team').replace('version: 1', 'version: 2').replace('pids: 512', 'pids: 256'));
    const store = await PolicyStore.load(dir);
    expect(store.resolve('team').ref.version).toBe(2);
    expect(store.resolve('team', 1).policy.resources.pids).toBe(512);
    expect(store.resolve('team', 1).ref.digest).not.toBe(store.resolve('team', 2).ref.digest);
    expect(() => store.resolve('team', 9)).toThrow(AppError);
  });

  it('refuses writable roots that add up to more than the memory limit (they are tmpfs)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-pol-'));
    const text = await readFile(join(policiesDir, 'default.yaml'), 'utf8');
    await writeFile(join(dir, 'big.yaml'), text.replace('sizeBytes: 1073741824', 'sizeBytes: 4294967296'));
    await expect(PolicyStore.load(dir)).rejects.toMatchObject({ code: 'policy.invalid', message: expect.stringContaining('filesystem.writableRoots') });
  });

  it('an invalid policy file is policy.invalid naming the file and the field', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-pol-'));
    await writeFile(join(dir, 'broken.yaml'), 'name: broken\nversion: 1\nnetwork: { mode: sideways }\n');
    const err = await PolicyStore.load(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('policy.invalid');
    expect((err as AppError).message).toContain('broken.yaml');
    expect((err as AppError).message).toContain('network.mode');
  });
});
