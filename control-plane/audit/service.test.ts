import { describe, expect, it } from 'vitest';
import { AuditLog } from './service.js';
import type { StoredAuditEntry } from './store.js';

/** The stream in memory: ids `<n>-0`, XREVRANGE semantics (newest first, strictly before a cursor). */
function memoryStore(): {
  append(json: string): Promise<string>;
  page(count: number, before?: string): Promise<StoredAuditEntry[]>;
  reads: number;
} {
  const rows: StoredAuditEntry[] = [];
  return {
    reads: 0,
    async append(json) {
      const id = `${rows.length + 1}-0`;
      rows.push({ id, json });
      return id;
    },
    async page(count, before) {
      this.reads += 1;
      const end = before === undefined ? rows.length : Number(before.split('-')[0]) - 1;
      return rows.slice(Math.max(0, end - count), end).reverse();
    },
  };
}

const at = new Date('2026-01-02T03:04:05.000Z');

async function logWith(
  n: number,
  action = (i: number) => (i % 10 === 0 ? 'policy.put' : 'lease.create'),
): Promise<{ log: AuditLog; store: ReturnType<typeof memoryStore> }> {
  const store = memoryStore();
  const log = new AuditLog(store, () => at);
  for (let i = 1; i <= n; i += 1) {
    await log.record({ actor: 'system', action: action(i), target: `lease:sbx_${i}`, beforeDigest: null, afterDigest: null });
  }
  return { log, store };
}

describe('AuditLog', () => {
  it('stamps id and time and fills empty details', async () => {
    const { log } = await logWith(0);
    const entry = await log.record({
      actor: 'system',
      action: 'policy.seed',
      target: 'policy:default',
      beforeDigest: null,
      afterDigest: null,
    });
    expect(entry).toEqual({
      id: '1-0',
      at: at.toISOString(),
      actor: 'system',
      action: 'policy.seed',
      target: 'policy:default',
      beforeDigest: null,
      afterDigest: null,
      details: {},
    });
  });

  it('refuses an entry that does not fit the schema (a bug of the caller) as a TypeError, not a client error', async () => {
    const { log } = await logWith(0);
    await expect(
      log.record({ actor: 'system', action: 'Not An Action', target: 'x', beforeDigest: null, afterDigest: null }),
    ).rejects.toThrow(TypeError);
  });

  it('pages newest first and the cursors walk every entry exactly once', async () => {
    const { log } = await logWith(23);
    const seen: string[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await log.list({ limit: 5, cursor });
      seen.push(...page.entries.map((e) => e.target));
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    expect(seen).toEqual(Array.from({ length: 23 }, (_, i) => `lease:sbx_${23 - i}`));
  });

  it('filters by action across batches, and a rare filter stops after a bounded scan with a cursor to go on', async () => {
    const { log } = await logWith(120);
    const puts = await log.list({ limit: 3, action: 'policy.put' });
    expect(puts.entries.map((e) => e.target)).toEqual(['lease:sbx_120', 'lease:sbx_110', 'lease:sbx_100']);
    expect(puts.nextCursor).toBe('100-0');

    const big = await logWith(6000, () => 'lease.create');
    const none = await big.log.list({ limit: 10, action: 'policy.delete' });
    expect(none.entries).toEqual([]);
    expect(none.nextCursor).not.toBeNull();
    const rest = await big.log.list({ limit: 10, action: 'policy.delete', cursor: none.nextCursor! });
    expect(rest).toEqual({ entries: [], nextCursor: null });
  });
});
