/**
 * The preview log in Redis: per lease, the newest PREVIEW_LOG_MAX preview connections, and how
 * many fell off (like the egress log, control-plane/egress/store.ts).
 *
 * Appends gather for PREVIEW_LOG_WINDOW_MS and go to Redis as one script per lease: a page
 * that loads fifty assets costs Redis one write, not fifty, and no request waits for one.
 * `read` writes what this process gathered for the lease first, so a reader here sees every
 * connection that ended before it asked; another control-plane process sees them at most one
 * window later. `close` writes what is left.
 */
import type { Redis } from 'ioredis';
import { PreviewEvent } from '../../contract/previews.js';

/** Preview events kept per lease (the oldest go first, counted). */
export const PREVIEW_LOG_MAX = 10_000;
/** How long appends gather before they are written, ms. */
export const PREVIEW_LOG_WINDOW_MS = 20;
/** Events per script call at most (Lua's unpack has a stack limit near 8,000). */
const APPEND_BATCH_MAX = 1000;

/** Appends; a log whose lease ended (KEYS[3], set by retain) keeps the rest of its retention. */
const APPEND = `
local n = redis.call('RPUSH', KEYS[1], unpack(ARGV, 2))
local max = tonumber(ARGV[1])
if n > max then
  redis.call('LTRIM', KEYS[1], n - max, -1)
  redis.call('INCRBY', KEYS[2], n - max)
end
local left = redis.call('PTTL', KEYS[3])
if left > 0 then
  redis.call('PEXPIRE', KEYS[1], left)
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], left) end
end
return n`;

/** Events of one lease waiting for their write, and who waits for it. */
interface Gathered {
  texts: string[];
  written: Array<{ resolve(): void; reject(err: unknown): void }>;
}

export class PreviewLog {
  private gathered = new Map<string, Gathered>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    events: (leaseId: string) => `${this.prefix}previews:${leaseId}`,
    dropped: (leaseId: string) => `${this.prefix}previews:${leaseId}:dropped`,
    retained: (leaseId: string) => `${this.prefix}previews:${leaseId}:retained`,
  };

  /**
   * Appends an event; past PREVIEW_LOG_MAX the oldest go and are counted. Resolves once it is
   * written (within PREVIEW_LOG_WINDOW_MS and a Redis round trip); rejects with Redis's error.
   */
  append(leaseId: string, event: PreviewEvent): Promise<void> {
    let batch = this.gathered.get(leaseId);
    if (!batch) {
      batch = { texts: [], written: [] };
      this.gathered.set(leaseId, batch);
    }
    batch.texts.push(JSON.stringify(event));
    const written = new Promise<void>((resolve, reject) => batch.written.push({ resolve, reject }));
    this.timer ??= setTimeout(() => void this.flush(), PREVIEW_LOG_WINDOW_MS).unref();
    return written;
  }

  /** Writes everything gathered (of `leaseId` alone when given); settles each append's promise. */
  private async flush(leaseId?: string): Promise<void> {
    const leases = leaseId === undefined ? [...this.gathered.keys()] : this.gathered.has(leaseId) ? [leaseId] : [];
    const batches = leases.map((id) => [id, this.gathered.get(id)!] as const);
    for (const id of leases) this.gathered.delete(id);
    if (this.gathered.size === 0 && this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    // Every script of this flush is sent now, before any answer: on the one connection, Redis
    // runs them in this order, after those of earlier flushes and before a read sent later.
    await Promise.all(
      batches.map(async ([id, batch]) => {
        const writes: Array<Promise<unknown>> = [];
        for (let at = 0; at < batch.texts.length; at += APPEND_BATCH_MAX) {
          const texts = batch.texts.slice(at, at + APPEND_BATCH_MAX);
          writes.push(this.redis.eval(APPEND, 3, this.k.events(id), this.k.dropped(id), this.k.retained(id), PREVIEW_LOG_MAX, ...texts));
        }
        const failed = (await Promise.allSettled(writes)).find((w) => w.status === 'rejected');
        for (const w of batch.written) failed ? w.reject(failed.reason) : w.resolve();
      }),
    );
  }

  /** Writes what is gathered; appends after this still work (the next window). */
  close(): Promise<void> {
    return this.flush();
  }

  /** The newest `limit` events of a lease, oldest first, and how many were dropped as the oldest. */
  async read(leaseId: string, limit: number): Promise<{ events: PreviewEvent[]; dropped: number }> {
    await this.flush(leaseId);
    const [texts, dropped] = await Promise.all([
      this.redis.lrange(this.k.events(leaseId), -limit, -1),
      this.redis.get(this.k.dropped(leaseId)),
    ]);
    return { events: texts.map((t) => PreviewEvent.parse(JSON.parse(t))), dropped: Number(dropped ?? 0) };
  }

  /**
   * Starts the retention clock of an ended lease's preview log: it expires after `seconds`, also
   * when a connection that was still open when the lease ended is logged later.
   */
  async retain(leaseId: string, seconds: number): Promise<void> {
    await this.flush(leaseId);
    await this.redis
      .multi()
      .set(this.k.retained(leaseId), '1', 'EX', seconds)
      .expire(this.k.events(leaseId), seconds)
      .expire(this.k.dropped(leaseId), seconds)
      .exec();
  }
}
