import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { SecretMetadata } from '../../contract/secrets.js';
import type { AuditInput } from '../audit/schema.js';
import type { Principal } from '../http/auth.js';
import { SecretService, type SecretRecords, type StoredSecret } from './service.js';

/** SecretRecords in a Map, holding what the Redis store would. */
class MemoryRecords implements SecretRecords {
  readonly rows = new Map<string, StoredSecret>();

  async put(name: string, r: Parameters<SecretRecords['put']>[1]): Promise<SecretMetadata> {
    const before = this.rows.get(name);
    const metadata = {
      name,
      version: (before?.metadata.version ?? 0) + 1,
      createdAt: before?.metadata.createdAt ?? r.at,
      updatedAt: r.at,
      updatedBy: r.updatedBy,
      sizeBytes: r.sizeBytes,
    };
    this.rows.set(name, { metadata, keyId: r.keyId, sealed: r.sealed });
    return metadata;
  }
  async get(name: string): Promise<StoredSecret | null> {
    return this.rows.get(name) ?? null;
  }
  async list(): Promise<SecretMetadata[]> {
    return [...this.rows.values()].map((r) => r.metadata);
  }
  async delete(name: string): Promise<boolean> {
    return this.rows.delete(name);
  }
}

const now = (): Date => new Date('2026-01-01T00:00:00.000Z');

/** The audit entries a service recorded. */
function auditSink(): { record: (entry: AuditInput) => Promise<never>; entries: AuditInput[] } {
  const entries: AuditInput[] = [];
  return { entries, record: async (entry) => (entries.push(entry), undefined as never) };
}
const admin = (keyId: string): Principal => ({ keyId, role: 'admin', tenant: 'default' });

describe('secret service', () => {
  it('stores values sealed (never in clear), counts versions, and reveals the latest value', async () => {
    const records = new MemoryRecords();
    const service = new SecretService({ records, key: randomBytes(32), audit: auditSink(), now });
    const first = await service.put('TOKEN', 'v1-värde', admin('key_a'));
    expect(first).toEqual({
      metadata: {
        name: 'TOKEN',
        version: 1,
        createdAt: now().toISOString(),
        updatedAt: now().toISOString(),
        updatedBy: 'key_a',
        sizeBytes: Buffer.byteLength('v1-värde'),
      },
      created: true,
    });
    expect((await service.put('TOKEN', 'second-value', admin('key_b'))).metadata).toMatchObject({
      version: 2,
      updatedBy: 'key_b',
      sizeBytes: 12,
    });
    // A value long enough that random ciphertext cannot contain it by chance.
    expect(JSON.stringify([...records.rows.values()])).not.toContain('second-value');
    expect((await service.reveal(['TOKEN'])).get('TOKEN')?.toString()).toBe('second-value');
  });

  it('a value moved to another name does not open: secret.unreadable', async () => {
    const records = new MemoryRecords();
    const service = new SecretService({ records, key: randomBytes(32), audit: auditSink(), now });
    await service.put('A', 'value-of-a', admin('k'));
    await service.put('B', 'value-of-b', admin('k'));
    records.rows.set('B', { ...records.rows.get('B')!, sealed: records.rows.get('A')!.sealed });
    await expect(service.reveal(['B'])).rejects.toMatchObject({ code: 'secret.unreadable', details: { name: 'B' } });
  });

  it('a value stored under another key is secret.unreadable; a missing one secret.not_found', async () => {
    const records = new MemoryRecords();
    await new SecretService({ records, key: randomBytes(32), audit: auditSink(), now }).put('A', 'x', admin('k'));
    const other = new SecretService({ records, key: randomBytes(32), audit: auditSink(), now });
    await expect(other.reveal(['A'])).rejects.toMatchObject({ code: 'secret.unreadable' });
    await expect(other.reveal(['NOPE'])).rejects.toMatchObject({ code: 'secret.not_found', details: { name: 'NOPE' } });
    await expect(other.metadata('NOPE')).rejects.toMatchObject({ code: 'secret.not_found' });
  });

  it('audits puts and deletes with digests of the metadata, never the value', async () => {
    const audit = auditSink();
    const service = new SecretService({ records: new MemoryRecords(), key: randomBytes(32), audit, now });
    await service.put('TOKEN', 'value-one', admin('key_a'));
    await service.put('TOKEN', 'value-two', admin('key_a'));
    expect(await service.delete('TOKEN', admin('key_b'))).toBe(true);
    expect(await service.delete('TOKEN', admin('key_b'))).toBe(false);
    expect(audit.entries.map((e) => [e.action, e.target, e.beforeDigest === null, e.afterDigest === null])).toEqual([
      ['secret.put', 'secret:TOKEN', true, false],
      ['secret.put', 'secret:TOKEN', false, false],
      ['secret.delete', 'secret:TOKEN', false, true],
    ]);
    expect(audit.entries[1]!.beforeDigest).toBe(audit.entries[0]!.afterDigest);
    expect(JSON.stringify(audit.entries)).not.toMatch(/value-one|value-two/);
  });

  it('refuses a key that is not 32 bytes', () => {
    expect(() => new SecretService({ records: new MemoryRecords(), key: randomBytes(16), audit: auditSink(), now })).toThrow(RangeError);
  });
});
