/**
 * Snapshot records in Redis: `<prefix>snapshots` (hash: id → record JSON). Few per tenant, so
 * listings and the byte count read the whole hash.
 */
import type { Redis } from 'ioredis';
import { SnapshotRecord } from './schema.js';

export class SnapshotStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key = (): string => `${this.prefix}snapshots`;

  async put(record: SnapshotRecord): Promise<void> {
    await this.redis.hset(this.key(), record.id, JSON.stringify(record));
  }

  async get(id: string): Promise<SnapshotRecord | null> {
    const text = await this.redis.hget(this.key(), id);
    return text === null ? null : SnapshotRecord.parse(JSON.parse(text));
  }

  /** Every record (all tenants), oldest first. */
  async list(): Promise<SnapshotRecord[]> {
    const all = (await this.redis.hvals(this.key())).map((t) => SnapshotRecord.parse(JSON.parse(t)));
    return all.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** Forgets a record; true when it existed. */
  async delete(id: string): Promise<boolean> {
    return (await this.redis.hdel(this.key(), id)) === 1;
  }
}
