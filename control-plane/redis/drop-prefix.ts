/**
 * Removes everything of one key prefix (`SBX_REDIS_PREFIX`) from Redis: its keys (SCAN and
 * UNLINK, so the server is never blocked) and the ACL users named under it (agent-link/acl.ts
 * names each lease's agent user so), then saves the ACL file, so a restarted Redis does not load
 * them back. For what runs an installation for a while and goes (a test run, a benchmark).
 */
import type { Redis } from 'ioredis';

export async function dropPrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.unlink(...keys);
  } while (cursor !== '0');
  const users = ((await redis.call('ACL', 'USERS')) as string[]).filter((u) => u.startsWith(prefix));
  for (const user of users) await redis.call('ACL', 'DELUSER', user);
  // A Redis without an ACL file refuses SAVE; its users live in memory only, and are gone already.
  if (users.length > 0) await redis.call('ACL', 'SAVE').catch(() => undefined);
}
