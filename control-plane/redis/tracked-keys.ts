/**
 * Reads of Redis string keys under given prefixes, cached in the process and never stale past
 * what Redis says: server-assisted client-side caching (CLIENT TRACKING in broadcasting mode,
 * https://redis.io/docs/latest/develop/reference/client-side-caching/). A connection of its own
 * turns tracking on with `BCAST PREFIX <prefix>...` and `REDIRECT` to itself, and subscribes to
 * `__redis__:invalidate`; Redis then names every key under the prefixes that changed (written,
 * deleted, expired, evicted), by anyone, and the cached value goes.
 *
 * Why: a sandbox request reads its lease first; with the record cached, that read costs no
 * Redis round trip while nothing changed it (bench `preview`: one request each).
 *
 * What keeps it true:
 * - a value is cached only when no invalidation arrived while its GET was in flight (an epoch
 *   counted up by every invalidation), so a reply that may predate a change is never kept;
 * - while the invalidation connection is not subscribed (starting, reconnecting, refused) the
 *   cache is empty and every read goes to Redis;
 * - `forget(key)` drops a key this process itself just wrote, before its invalidation arrives;
 * - a value is read again after MAX_AGE_MS in any case, which bounds what a lost invalidation
 *   could leave stale (a tracking connection cut without this process noticing yet).
 * A change made elsewhere is seen once its invalidation arrives, which Redis sends before it
 * next waits for clients after applying the change (a GET issued a moment earlier could return
 * the old value just the same).
 *
 * When Redis refuses tracking (a managed service without CLIENT TRACKING), it logs so once and
 * every read goes to Redis.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';

/** Values kept at most; past it, the one cached longest ago goes first. */
const MAX_ENTRIES = 4096;
/**
 * A cached value is read again after this long, ms, whatever Redis said: the bound on
 * staleness should invalidations be lost unnoticed (a half-open tracking connection).
 */
const MAX_AGE_MS = 1000;
const INVALIDATE_CHANNEL = '__redis__:invalidate';

export class TrackedKeys {
  private readonly values = new Map<string, { value: string | null; atMs: number }>();
  private readonly tracker: Redis;
  /** Counts invalidations and connection changes: a read spanning one is not cached. */
  private epoch = 0;
  private tracking = false;
  /** Counts the tracking connection's closes: a track() that spans one is abandoned. */
  private connection = 0;
  private starting = false;
  /** A connection became ready while track() ran for an earlier one: run it again after. */
  private again = false;
  private closed = false;
  private warned = false;
  private trackedCount = 0;
  private readonly firstAttempt: Promise<void>;
  private settleFirst: () => void = () => undefined;

  /**
   * Starts tracking `prefixes` (full key prefixes, e.g. `sbx:leases:`; none a prefix of
   * another) on a connection duplicated from `redis`; reads go through `redis`. Resolves once
   * the first attempt to turn tracking on settled (reads work either way).
   */
  static async start(redis: Redis, prefixes: readonly string[], log: Pick<Logger, 'warn'>): Promise<TrackedKeys> {
    const keys = new TrackedKeys(redis, prefixes, log);
    await keys.firstAttempt;
    return keys;
  }

  private constructor(
    private readonly redis: Redis,
    private readonly prefixes: readonly string[],
    private readonly log: Pick<Logger, 'warn'>,
  ) {
    this.firstAttempt = new Promise((resolve) => (this.settleFirst = resolve));
    // Subscribed again by track(), after tracking is on: never by ioredis on its own.
    // Nothing is sent again on a new connection by ioredis itself (no resubscribe, no resend of
    // what was in flight, no offline queue): tracking is on only where track() turned it on.
    this.tracker = redis.duplicate({
      autoResubscribe: false,
      autoResendUnfulfilledCommands: false,
      enableOfflineQueue: false,
      connectionName: `sbx-tracked-keys-${randomBytes(6).toString('hex')}`,
    });
    this.tracker.on('error', () => this.settleFirst());
    this.tracker.on('close', () => {
      this.connection += 1;
      this.untrack();
    });
    this.tracker.on('ready', () => void this.track());
    // RESP2 invalidation messages carry the changed keys as an array; null means "all of them".
    this.tracker.on('messageBuffer', (channel: Buffer, keys: Buffer | Buffer[] | null) => {
      if (channel.toString() !== INVALIDATE_CHANNEL) return;
      this.epoch += 1;
      if (Array.isArray(keys)) for (const key of keys) this.values.delete(key.toString());
      else this.values.clear();
    });
  }

  /** The value of `key` (null when absent): from the cache when tracked and unchanged, else a GET. */
  async get(key: string): Promise<string | null> {
    const cached = this.tracking ? this.values.get(key) : undefined;
    if (cached !== undefined && performance.now() - cached.atMs < MAX_AGE_MS) return cached.value;
    const epoch = this.epoch;
    const atMs = performance.now();
    const value = await this.redis.get(key);
    if (this.tracking && this.epoch === epoch && this.prefixes.some((p) => key.startsWith(p))) {
      this.values.delete(key);
      this.values.set(key, { value, atMs });
      if (this.values.size > MAX_ENTRIES) this.values.delete(this.values.keys().next().value!);
    }
    return value;
  }

  /** Drops `key` (this process just changed it). */
  forget(key: string): void {
    this.epoch += 1;
    this.values.delete(key);
  }

  /** Whether reads are being cached now (tracking is on). */
  get active(): boolean {
    return this.tracking;
  }

  /** How many connections tracking was turned on for (one more after each reconnect). */
  get trackedConnections(): number {
    return this.trackedCount;
  }

  /** The name of the tracking connection (CLIENT LIST), unique to this instance. */
  get connectionName(): string {
    return this.tracker.options.connectionName!;
  }

  /** Closes the tracking connection; reads keep working, uncached. */
  close(): void {
    this.closed = true;
    this.untrack();
    this.tracker.disconnect();
  }

  private untrack(): void {
    this.tracking = false;
    this.epoch += 1;
    this.values.clear();
  }

  /** Turns tracking on for this connection (after each connect); on failure reads stay uncached. */
  private async track(): Promise<void> {
    if (this.closed) return;
    if (this.starting) {
      this.again = true;
      return;
    }
    this.starting = true;
    const connection = this.connection;
    try {
      const id = (await this.tracker.client('ID')) as number;
      await this.tracker.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', String(id), 'BCAST', ...this.prefixes.flatMap((p) => ['PREFIX', p]));
      await this.tracker.subscribe(INVALIDATE_CHANNEL);
      // Closed meanwhile: these commands ran on a connection that is gone (the next ready tracks).
      if (connection !== this.connection || this.closed) return;
      this.untrack();
      this.tracking = true;
      this.trackedCount += 1;
    } catch (err) {
      this.untrack();
      if (connection === this.connection && !this.warned) {
        this.warned = true;
        this.log.warn({ err }, 'Redis client-side caching is unavailable; lease reads go to Redis each time');
      }
    } finally {
      this.starting = false;
      this.settleFirst();
      if (this.again) {
        this.again = false;
        if (this.tracker.status === 'ready') void this.track();
      }
    }
  }
}
