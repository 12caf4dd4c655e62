/**
 * Secret records in Redis: one hash per secret under `<prefix>secrets:<name>` (metadata, key
 * id, IV, tag and ciphertext — the value only ever sealed) and a set `<prefix>secrets` of the
 * names. Versions are counted by Redis (HINCRBY in one MULTI), so concurrent PUTs never share one.
 */
import type { Redis } from 'ioredis';
import type { SecretMetadata } from '../../contract/secrets.js';
import type { SecretRecords, StoredSecret } from './service.js';

const FIELDS = ['version', 'createdAt', 'updatedAt', 'updatedBy', 'sizeBytes', 'keyId', 'iv', 'tag', 'ciphertext'] as const;

/** `SecretRecords` in Redis under `prefix` (the installation's key prefix, e.g. `sbx:`). */
export class RedisSecretRecords implements SecretRecords {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key(name: string): string {
    return `${this.prefix}secrets:${name}`;
  }

  private get index(): string {
    return `${this.prefix}secrets`;
  }

  async put(name: string, r: Parameters<SecretRecords['put']>[1]): Promise<SecretMetadata> {
    const key = this.key(name);
    const results = await this.redis
      .multi()
      .hincrby(key, 'version', 1)
      .hsetnx(key, 'createdAt', r.at)
      .hset(key, {
        updatedAt: r.at,
        updatedBy: r.updatedBy,
        sizeBytes: r.sizeBytes,
        keyId: r.keyId,
        iv: r.sealed.iv,
        tag: r.sealed.tag,
        ciphertext: r.sealed.ciphertext,
      })
      .sadd(this.index, name)
      .hget(key, 'createdAt')
      .exec();
    const failed = results?.find(([err]) => err);
    if (!results || failed) throw failed?.[0] ?? new Error('secret write was aborted');
    return {
      name,
      version: Number(results[0]![1]),
      createdAt: String(results[4]![1]),
      updatedAt: r.at,
      updatedBy: r.updatedBy,
      sizeBytes: r.sizeBytes,
    };
  }

  async get(name: string): Promise<StoredSecret | null> {
    return toStored(name, await this.redis.hmget(this.key(name), ...FIELDS));
  }

  async list(): Promise<SecretMetadata[]> {
    const names = (await this.redis.smembers(this.index)).sort();
    if (names.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const name of names) pipeline.hmget(this.key(name), ...FIELDS);
    const rows = (await pipeline.exec()) ?? [];
    return names.flatMap((name, i) => {
      const stored = toStored(name, (rows[i]?.[1] as Array<string | null>) ?? []);
      return stored ? [stored.metadata] : [];
    });
  }

  async delete(name: string): Promise<boolean> {
    const results = await this.redis.multi().del(this.key(name)).srem(this.index, name).exec();
    return Number(results?.[0]?.[1] ?? 0) > 0;
  }
}

function toStored(name: string, values: Array<string | null>): StoredSecret | null {
  const [version, createdAt, updatedAt, updatedBy, sizeBytes, keyId, iv, tag, ciphertext] = values;
  if (!version || !createdAt || !updatedAt || !keyId || !iv || !tag || ciphertext == null) return null;
  return {
    metadata: { name, version: Number(version), createdAt, updatedAt, updatedBy: updatedBy ?? '', sizeBytes: Number(sizeBytes ?? 0) },
    keyId,
    sealed: { iv, tag, ciphertext },
  };
}
