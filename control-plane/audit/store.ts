/**
 * The audit log's Redis adapter: one stream (`<prefix>audit`) appended with XADD and read
 * newest first with XREVRANGE. There is no update or delete; the stream is never trimmed.
 */
import type { Redis } from 'ioredis';

/** A raw stored entry: its stream id and the JSON text of the rest. */
export interface StoredAuditEntry {
  id: string;
  json: string;
}

export class RedisAuditStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private get key(): string {
    return `${this.prefix}audit`;
  }

  /** Appends `json`; returns the stream id Redis assigned (`<ms>-<n>`, increasing). */
  async append(json: string): Promise<string> {
    const id = await this.redis.xadd(this.key, '*', 'e', json);
    // XADD with `*` never yields null (only NOMKSTREAM does); keep the type honest anyway.
    if (id === null) throw new Error('XADD returned no id');
    return id;
  }

  /** Up to `count` entries, newest first, strictly older than `before` (an id) when given. */
  async page(count: number, before?: string): Promise<StoredAuditEntry[]> {
    // Nothing is older than the smallest id, and Redis refuses the interval `(0-0`.
    if (before === '0-0') return [];
    const rows = await this.redis.xrevrange(this.key, before === undefined ? '+' : `(${before}`, '-', 'COUNT', count);
    return rows.map(([id, fields]) => ({ id, json: fields[1] ?? '{}' }));
  }
}
