/**
 * Built-image records in Redis: the record per id, a tenant's ids, a tenant's names, the
 * content-digest index that makes the same build input give the same image (claimed with SET NX,
 * so two concurrent builds of one input build once), and each build's events (gap-free `seq`;
 * every append publishes on `<prefix>notify:image:<id>`, which wakes the SSE streams).
 */
import type { Redis } from 'ioredis';
import { canonicalJson } from '../../contract/digest.js';
import { ImageEvent, ImageRecord, type ImageEventBody } from './schema.js';

const APPEND_EVENT = `
local seq = redis.call('LLEN', KEYS[1]) + 1
redis.call('RPUSH', KEYS[1], '{"seq":' .. seq .. ',' .. string.sub(ARGV[1], 2))
redis.call('PUBLISH', ARGV[2], seq)
return seq`;

/** Sets the record only while it is still `building` (a build's end is written once). */
const FINISH = `
local current = redis.call('GET', KEYS[1])
if not current or not string.find(current, '"status":"building"', 1, true) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`;

export class ImageStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    image: (id: string) => `${this.prefix}images:${id}`,
    events: (id: string) => `${this.prefix}images:${id}:events`,
    tenant: (tenant: string) => `${this.prefix}images:tenant:${tenant}`,
    name: (tenant: string, name: string) => `${this.prefix}images:name:${tenant}:${name}`,
    content: (tenant: string, digest: string) => `${this.prefix}images:content:${tenant}:${digest}`,
  };

  /** Channel the image's events are announced on (matches the notifier's `<prefix>notify:*`). */
  notifyChannel(id: string): string {
    return `${this.prefix}notify:image:${id}`;
  }

  /**
   * Claims the content digest for `record` and stores it; returns the record that already holds
   * the digest instead when there is one (nothing is stored then).
   */
  async claim(record: ImageRecord): Promise<ImageRecord | null> {
    const won = await this.redis.set(this.k.content(record.tenant, record.contentDigest), record.id, 'NX');
    if (won === null) {
      const existing = await this.get(record.id);
      if (existing) return existing;
      // The digest's holder is being written or was deleted a moment ago: take the index over.
      await this.redis.set(this.k.content(record.tenant, record.contentDigest), record.id);
    }
    await this.redis.multi().set(this.k.image(record.id), JSON.stringify(record)).sadd(this.k.tenant(record.tenant), record.id).exec();
    return null;
  }

  /** Replaces a stored record (e.g. a failed build retried with the same input). */
  async put(record: ImageRecord): Promise<void> {
    await this.redis.set(this.k.image(record.id), JSON.stringify(record));
  }

  /** Writes a build's end; false when the record is no longer `building`. */
  async finish(record: ImageRecord): Promise<boolean> {
    return ((await this.redis.eval(FINISH, 1, this.k.image(record.id), JSON.stringify(record))) as number) === 1;
  }

  async get(id: string): Promise<ImageRecord | null> {
    const text = await this.redis.get(this.k.image(id));
    return text === null ? null : ImageRecord.parse(JSON.parse(text));
  }

  async list(tenant: string): Promise<ImageRecord[]> {
    const ids = await this.redis.smembers(this.k.tenant(tenant));
    const records = await Promise.all(ids.map((id) => this.get(id)));
    return records.filter((r): r is ImageRecord => r !== null).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** Points `tenant`'s `name` at image `id`. */
  async setName(tenant: string, name: string, id: string): Promise<void> {
    await this.redis.set(this.k.name(tenant, name), id);
  }

  /** The id `tenant`'s `name` points at, if any. */
  async byName(tenant: string, name: string): Promise<string | null> {
    return this.redis.get(this.k.name(tenant, name));
  }

  /** Deletes the record, its events, its content index and its name (when the name still points at it). */
  async delete(record: ImageRecord): Promise<void> {
    const multi = this.redis.multi().del(this.k.image(record.id), this.k.events(record.id)).srem(this.k.tenant(record.tenant), record.id);
    await multi.exec();
    const contentKey = this.k.content(record.tenant, record.contentDigest);
    if ((await this.redis.get(contentKey)) === record.id) await this.redis.del(contentKey);
    if (record.name !== null && (await this.byName(record.tenant, record.name)) === record.id)
      await this.redis.del(this.k.name(record.tenant, record.name));
  }

  /** Appends one event; returns its `seq`. */
  async appendEvent(id: string, body: ImageEventBody, at: Date): Promise<number> {
    const json = canonicalJson({ ...body, at: at.toISOString() });
    return (await this.redis.eval(APPEND_EVENT, 1, this.k.events(id), json, this.notifyChannel(id))) as number;
  }

  /** Clears a build's events (a failed build rebuilt from the same input starts a new stream). */
  async clearEvents(id: string): Promise<void> {
    await this.redis.del(this.k.events(id));
  }

  /** Events with `seq` > `afterSeq`, in order. */
  async readEvents(id: string, afterSeq = 0): Promise<ImageEvent[]> {
    const texts = await this.redis.lrange(this.k.events(id), afterSeq, -1);
    return texts.map((t) => ImageEvent.parse(JSON.parse(t)));
  }
}
