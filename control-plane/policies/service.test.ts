import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { AuditInput } from '../audit/schema.js';
import type { Principal } from '../http/auth.js';
import { Policy, type PolicyHead, type PolicyVersion } from './schema.js';
import { PolicyService } from './service.js';
import type { ReadHead } from './store.js';

const admin: Principal = { keyId: 'key_a', role: 'admin', tenant: 'default' };
const defaultPolicy = async (): Promise<Policy> =>
  Policy.parse(parseYaml(await readFile(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));

/** The store in memory, with the same compare-and-swap on the head text; `interfere` runs before a swap (another writer). */
function memoryStore(interfere?: () => void) {
  const headText = new Map<string, string>();
  const versions = new Map<string, PolicyVersion>();
  return {
    headText,
    async head(name: string): Promise<ReadHead | null> {
      const raw = headText.get(name);
      return raw === undefined ? null : { head: JSON.parse(raw) as PolicyHead, raw };
    },
    async heads(): Promise<PolicyHead[]> {
      return [...headText.values()].map((raw) => JSON.parse(raw) as PolicyHead);
    },
    async version(name: string, version: number) {
      return versions.get(`${name}@${version}`) ?? null;
    },
    async versions(name: string) {
      return [...versions.values()].filter((v) => v.name === name).sort((a, b) => a.version - b.version);
    },
    async swap(expected: ReadHead | null, next: PolicyHead, record?: PolicyVersion) {
      interfere?.();
      if ((headText.get(next.name) ?? '') !== (expected?.raw ?? '')) return false;
      headText.set(next.name, JSON.stringify(next));
      if (record) versions.set(`${record.name}@${record.version}`, record);
      return true;
    },
  };
}

function service(store: ReturnType<typeof memoryStore>): { policies: PolicyService; audit: AuditInput[] } {
  const audit: AuditInput[] = [];
  const policies = new PolicyService({
    store,
    audit: { record: async (e) => (audit.push(e), { ...(e as any), id: '1-0', at: '' }) },
    now: () => new Date('2026-01-01T00:00:00.000Z'),
  });
  return { policies, audit };
}

describe('PolicyService', () => {
  it('seeding imports a file version only above the stored latest', async () => {
    const store = memoryStore();
    const { policies, audit } = service(store);
    const v1 = await defaultPolicy();
    expect(await policies.seed([v1])).toHaveLength(1);
    expect(await policies.seed([v1])).toEqual([]);
    expect(await policies.seed([{ ...v1, version: 2 }])).toEqual([expect.objectContaining({ version: 2 })]);
    expect(audit.map((e) => [e.action, e.actor])).toEqual([
      ['policy.seed', 'system'],
      ['policy.seed', 'system'],
    ]);
  });

  it('a PUT without version that loses its version number to another writer retries on the next one', async () => {
    let other = true;
    const store = memoryStore(() => {
      // Before the first swap, another writer takes version 2.
      if (other && store.headText.has('default')) {
        other = false;
        const head = JSON.parse(store.headText.get('default')!) as PolicyHead;
        store.headText.set('default', JSON.stringify({ ...head, latest: 2 }));
      }
    });
    const { policies } = service(store);
    await policies.seed([await defaultPolicy()]);
    const { version } = await policies.put('default', { ...(await defaultPolicy()), version: undefined }, admin);
    expect(version.version).toBe(3);
  });

  it('a PUT with version loses to another writer as policy.version_conflict, writing nothing', async () => {
    const store = memoryStore();
    const { policies } = service(store);
    await policies.seed([await defaultPolicy()]);
    const body = { ...(await defaultPolicy()), version: 2 };
    await policies.put('default', body, admin);
    await expect(policies.put('default', body, admin)).rejects.toMatchObject({
      code: 'policy.version_conflict',
      details: { expected: 3, given: 2 },
    });
    expect((await policies.history('default')).versions).toHaveLength(2);
  });

  it('resolve refuses a deleted policy at any version; history stays readable', async () => {
    const store = memoryStore();
    const { policies } = service(store);
    await policies.seed([await defaultPolicy()]);
    await policies.delete('default', admin);
    await expect(policies.resolve('default')).rejects.toMatchObject({ code: 'policy.not_found' });
    await expect(policies.resolve('default', 1)).rejects.toMatchObject({ code: 'policy.not_found' });
    expect((await policies.version('default', 1)).version).toBe(1);
  });
});
