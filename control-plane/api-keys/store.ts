/**
 * API keys in Redis: `<prefix>api-keys` (hash: id → record JSON) and `<prefix>api-key-digests`
 * (hash: hex sha256 of the secret → id). A key is found by its digest only while indexed;
 * revoking removes the index entry in the same transaction as it marks the record.
 */
import type { Redis } from 'ioredis';
import { ApiKeyRecord } from './schema.js';

/** KEYS: digests, records; ARGV: digest. The record JSON of the indexed key, or nil. */
const BY_DIGEST = `local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return nil end
return redis.call('HGET', KEYS[2], id)`;

export class RedisApiKeyStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    records: () => `${this.prefix}api-keys`,
    digests: () => `${this.prefix}api-key-digests`,
  };

  /** Stores a new key and indexes its digest, in one transaction. */
  async insert(record: ApiKeyRecord): Promise<void> {
    await this.redis
      .multi()
      .hset(this.k.records(), record.id, JSON.stringify(record))
      .hset(this.k.digests(), record.sha256, record.id)
      .exec();
  }

  async get(id: string): Promise<ApiKeyRecord | null> {
    const text = await this.redis.hget(this.k.records(), id);
    return text === null ? null : ApiKeyRecord.parse(JSON.parse(text));
  }

  /** The live (not revoked) key whose secret has this hex sha256, if any. */
  async byDigest(sha256: string): Promise<ApiKeyRecord | null> {
    // One round trip (it runs before every authenticated request): the index, then the record.
    const text = (await this.redis.eval(BY_DIGEST, 2, this.k.digests(), this.k.records(), sha256)) as string | null;
    if (text === null) return null;
    const record = ApiKeyRecord.parse(JSON.parse(text));
    return record.revokedAt === null ? record : null;
  }

  /** Every key, revoked ones included. */
  async list(): Promise<ApiKeyRecord[]> {
    const all = await this.redis.hvals(this.k.records());
    return all.map((text) => ApiKeyRecord.parse(JSON.parse(text)));
  }

  /** Writes the revoked record and drops its digest from the index, in one transaction. */
  async revoke(record: ApiKeyRecord): Promise<void> {
    await this.redis.multi().hset(this.k.records(), record.id, JSON.stringify(record)).hdel(this.k.digests(), record.sha256).exec();
  }
}
