/**
 * Redis connections for the control plane. ioredis is imported only here, in `redis/`, in the
 * domains' `store.ts` files and in `agent-link/` (contract/import-boundaries.test.ts).
 */
import { Redis, type RedisOptions } from 'ioredis';

/** Where Redis is: a unix socket path, or a `redis://` / `rediss://` URL; the default user's password. */
export interface RedisEndpoint {
  path?: string;
  url?: string;
  password?: string;
}

/**
 * Connection options for `endpoint`. BullMQ needs `maxRetriesPerRequest: null` on connections
 * its workers block on.
 */
export function redisOptions(endpoint: RedisEndpoint): RedisOptions {
  const base: RedisOptions = { maxRetriesPerRequest: null, lazyConnect: false };
  if (endpoint.password !== undefined) base.password = endpoint.password;
  if (endpoint.path) return { ...base, path: endpoint.path };
  const url = new URL(endpoint.url!);
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
