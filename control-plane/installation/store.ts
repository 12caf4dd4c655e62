/**
 * The installation id: what makes "this installation's" sandboxes tell apart from another's on
 * the same Docker engine. `sbx.owner` is a setting, and two installations left at its default
 * share it; the id is made by the first control plane that starts against a Redis and key
 * prefix (one ledger), so every process of one installation reads the same id and no other
 * installation can. It goes into the `sbx.installation` label of everything sbx creates, and
 * reconcile, reaping and release touch only what carries it.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';

/**
 * The id stored at `<prefix>installation`, made (`inst_` + a random UUID) and stored with SET NX
 * when there is none: of several first starts at once, one writes and all read what it wrote.
 * The key never expires and nothing deletes it; a Redis that lost it (flushed, replaced) makes a
 * new installation, which leaves the old one's sandboxes alone.
 */
export async function installationId(redis: Redis, prefix: string): Promise<string> {
  const key = `${prefix}installation`;
  await redis.set(key, `inst_${randomUUID()}`, 'NX');
  const id = await redis.get(key);
  if (id === null) throw new Error(`${key} vanished right after SET NX`);
  return id;
}
