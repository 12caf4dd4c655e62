/**
 * Redis connections for the control plane. Only `queue/` and `ledger/` import ioredis.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Config } from '../config.js';

/**
 * Connection options from the config: a unix socket path or a `redis://` URL. BullMQ needs
 * `maxRetriesPerRequest: null` on connections its workers block on.
 */
export function redisOptions(redis: Config['redis']): RedisOptions {
  const base: RedisOptions = { maxRetriesPerRequest: null, lazyConnect: false };
  if (redis.password !== undefined) base.password = redis.password;
  if (redis.path) return { ...base, path: redis.path };
  const url = new URL(redis.url!);
  return {
    ...base,
    host: url.hostname,
    port: Number(url.port || 6379),
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
    db: Number(url.pathname.slice(1) || 0),
  };
}

export function connectRedis(options: RedisOptions): Redis {
  return new Redis(options);
}

export type { Redis, RedisOptions };
