/**
 * `AuditLog`: the append-only record of who changed what — every admin change (API keys,
 * policies, and what other domains add) and every lease create, release and expiry. Domains
 * call `record()` after their change took effect; the log stamps the time and an id.
 */
import type { Principal } from '../http/auth.js';
import { AuditEntry, AuditInput, type AuditActor, type AuditQuery } from './schema.js';
import type { RedisAuditStore } from './store.js';

/** The most entries one `list()` reads while filtering, so a rare filter cannot scan the whole log in one request. */
const MAX_SCANNED_PER_PAGE = 5000;

/** The audit actor of an API key's principal. */
export function actorOf(principal: Principal): AuditActor {
  return { keyId: principal.keyId, role: principal.role, tenant: principal.tenant };
}

export class AuditLog {
  constructor(
    private readonly store: Pick<RedisAuditStore, 'append' | 'page'>,
    private readonly now: () => Date,
  ) {}

  /**
   * Appends one entry and returns it with its `id` and `at`. Throws TypeError when `entry` does
   * not fit the schema: a bug of the calling domain, not a client's mistake, so not an AppError.
   */
  async record(entry: AuditInput): Promise<AuditEntry> {
    const parsed = AuditInput.safeParse(entry);
    if (!parsed.success) {
      throw new TypeError(`audit entry: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    }
    const body = { at: this.now().toISOString(), ...parsed.data };
    const id = await this.store.append(JSON.stringify(body));
    return { id, ...body };
  }

  /**
   * Entries newest first, filtered by exact `action` and `target`. Pass `nextCursor` as `cursor`
   * for the next page; it is null once the log is read to its start. A page may hold fewer than
   * `limit` entries and still have a cursor (a filter matched few of the entries scanned), and
   * a full page's cursor may lead to an empty one.
   */
  async list(query: AuditQuery): Promise<{ entries: AuditEntry[]; nextCursor: string | null }> {
    const entries: AuditEntry[] = [];
    const batch = query.action === undefined && query.target === undefined ? query.limit : Math.max(query.limit * 4, 200);
    let cursor = query.cursor;
    let scanned = 0;
    for (;;) {
      const rows = await this.store.page(batch, cursor);
      for (const row of rows) {
        scanned += 1;
        cursor = row.id;
        const entry = AuditEntry.parse({ id: row.id, ...JSON.parse(row.json) });
        if (
          (query.action === undefined || entry.action === query.action) &&
          (query.target === undefined || entry.target === query.target)
        ) {
          entries.push(entry);
          if (entries.length === query.limit) return { entries, nextCursor: cursor };
        }
      }
      if (rows.length < batch) return { entries, nextCursor: null };
      if (scanned >= MAX_SCANNED_PER_PAGE) return { entries, nextCursor: cursor ?? null };
    }
  }
}
