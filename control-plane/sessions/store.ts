/**
 * Session records in Redis: per sandbox, a hash of the sessions ever started (sessionId → record)
 * and the set of those counted against `sessions.max`. The reservation is one Lua script, so two
 * creates at once cannot both take the last place.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';

export const SessionRecord = z.object({
  sessionId: z.string(),
  sandboxId: z.string(),
  callId: z.string(),
  cwd: z.string().nullable(),
  createdAt: z.string(),
});
export type SessionRecord = z.infer<typeof SessionRecord>;

const RESERVE = `
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return 1`;

export class SessionStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    records: (leaseId: string) => `${this.prefix}sessions:${leaseId}`,
    live: (leaseId: string) => `${this.prefix}sessions-live:${leaseId}`,
  };

  /** Records `record` and counts it as live, unless `max` are live already (false). */
  async reserve(record: SessionRecord, max: number): Promise<boolean> {
    const ok = await this.redis.eval(
      RESERVE,
      2,
      this.k.records(record.sandboxId),
      this.k.live(record.sandboxId),
      record.sessionId,
      JSON.stringify(record),
      String(max),
    );
    return ok === 1;
  }

  /** Stops counting a session as live (it ended, or never started). */
  async release(leaseId: string, sessionId: string): Promise<void> {
    await this.redis.srem(this.k.live(leaseId), sessionId);
  }

  async liveIds(leaseId: string): Promise<string[]> {
    return this.redis.smembers(this.k.live(leaseId));
  }

  async get(leaseId: string, sessionId: string): Promise<SessionRecord | null> {
    const text = await this.redis.hget(this.k.records(leaseId), sessionId);
    return text === null ? null : SessionRecord.parse(JSON.parse(text));
  }

  async list(leaseId: string): Promise<SessionRecord[]> {
    const all = await this.redis.hvals(this.k.records(leaseId));
    return all.map((t) => SessionRecord.parse(JSON.parse(t))).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }
}
