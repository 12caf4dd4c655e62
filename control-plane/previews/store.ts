/**
 * The preview log in Redis: per lease, the newest PREVIEW_LOG_MAX preview connections, and how
 * many fell off (like the egress log, control-plane/egress/store.ts).
 */
import type { Redis } from 'ioredis';
import { PreviewEvent } from '../../contract/previews.js';

/** Preview events kept per lease (the oldest go first, counted). */
export const PREVIEW_LOG_MAX = 10_000;

const APPEND = `
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local max = tonumber(ARGV[2])
if n > max then
  redis.call('LTRIM', KEYS[1], n - max, -1)
  redis.call('INCRBY', KEYS[2], n - max)
end
return n`;

export class PreviewLog {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    events: (leaseId: string) => `${this.prefix}previews:${leaseId}`,
    dropped: (leaseId: string) => `${this.prefix}previews:${leaseId}:dropped`,
  };

  /** Appends an event; past PREVIEW_LOG_MAX the oldest go and are counted. */
  async append(leaseId: string, event: PreviewEvent): Promise<void> {
    await this.redis.eval(APPEND, 2, this.k.events(leaseId), this.k.dropped(leaseId), JSON.stringify(event), PREVIEW_LOG_MAX);
  }

  /** The newest `limit` events of a lease, oldest first, and how many were dropped as the oldest. */
  async read(leaseId: string, limit: number): Promise<{ events: PreviewEvent[]; dropped: number }> {
    const [texts, dropped] = await Promise.all([
      this.redis.lrange(this.k.events(leaseId), -limit, -1),
      this.redis.get(this.k.dropped(leaseId)),
    ]);
    return { events: texts.map((t) => PreviewEvent.parse(JSON.parse(t))), dropped: Number(dropped ?? 0) };
  }

  /** Starts the retention clock of an ended lease's preview log: it expires after `seconds`. */
  async retain(leaseId: string, seconds: number): Promise<void> {
    await this.redis.multi().expire(this.k.events(leaseId), seconds).expire(this.k.dropped(leaseId), seconds).exec();
  }
}
