/**
 * The egress log in Redis: per lease (or image build, by its `img_…` id) and decision, the
 * newest EGRESS_LOG_MAX events, and how many fell off.
 */
import type { Redis } from 'ioredis';
import type { CredentialsInjected } from '../../contract/egress.js';
import { EgressEvent } from '../../contract/objects.js';

/** Egress events kept per lease and decision (the oldest go first, counted). */
export const EGRESS_LOG_MAX = 10_000;
/** How long a call's injection counts are kept after their last change, s: past any call's life, read when it finishes. */
const INJECTED_TTL_SECONDS = 7 * 24 * 3600;

const APPEND_EGRESS = `
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local max = tonumber(ARGV[2])
if n > max then
  redis.call('LTRIM', KEYS[1], n - max, -1)
  redis.call('HINCRBY', KEYS[2], ARGV[3], n - max)
end
return n`;

export class EgressLog {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    egress: (leaseId: string, decision: EgressEvent['decision']) => `${this.prefix}egress:${leaseId}:${decision}`,
    egressDropped: (leaseId: string) => `${this.prefix}egress:${leaseId}:dropped`,
    injected: (leaseId: string, callId: string) => `${this.prefix}egress:${leaseId}:injected:${callId}`,
  };

  /** Adds to call `callId`'s counts of secrets injected into its requests to `host` (by secret name). */
  async addInjected(leaseId: string, callId: string, host: string, counts: ReadonlyMap<string, number>): Promise<void> {
    const key = this.k.injected(leaseId, callId);
    const multi = this.redis.multi();
    for (const [secret, count] of counts) multi.hincrby(key, `${secret}\n${host}`, count);
    multi.expire(key, INJECTED_TTL_SECONDS);
    await multi.exec();
  }

  /** What addInjected counted for a call, sorted by secret and host; empty when nothing was injected. */
  async injectedInto(leaseId: string, callId: string): Promise<CredentialsInjected> {
    const counts = await this.redis.hgetall(this.k.injected(leaseId, callId));
    return Object.entries(counts)
      .map(([field, count]) => {
        const [secret = '', host = ''] = field.split('\n');
        return { secret, host, count: Number(count) };
      })
      .sort((a, b) => a.secret.localeCompare(b.secret) || a.host.localeCompare(b.host));
  }

  /**
   * Appends an egress event. Allowed and denied events are kept apart, the newest
   * EGRESS_LOG_MAX of each, and what falls off is counted: a sandbox flooding denied requests
   * cannot push its allowed connections out of the log, and no loss goes unreported.
   */
  async append(leaseId: string, event: EgressEvent): Promise<void> {
    await this.redis.eval(
      APPEND_EGRESS,
      2,
      this.k.egress(leaseId, event.decision),
      this.k.egressDropped(leaseId),
      JSON.stringify(event),
      EGRESS_LOG_MAX,
      event.decision,
    );
  }

  /** A lease's egress events, oldest first, and how many of each decision were dropped as the oldest. */
  async read(leaseId: string): Promise<{ events: EgressEvent[]; dropped: { allowed: number; denied: number } }> {
    const [allowed, denied, dropped] = await Promise.all([
      this.redis.lrange(this.k.egress(leaseId, 'allowed'), 0, -1),
      this.redis.lrange(this.k.egress(leaseId, 'denied'), 0, -1),
      this.redis.hgetall(this.k.egressDropped(leaseId)),
    ]);
    const events = [...allowed, ...denied].map((t) => EgressEvent.parse(JSON.parse(t))).sort((a, b) => a.at.localeCompare(b.at));
    return { events, dropped: { allowed: Number(dropped.allowed ?? 0), denied: Number(dropped.denied ?? 0) } };
  }

  /** Removes a log (a deleted image's, or one built again), idempotent. */
  async clear(id: string): Promise<void> {
    await this.redis.del(this.k.egress(id, 'allowed'), this.k.egress(id, 'denied'), this.k.egressDropped(id));
  }

  /** Starts the retention clock of an ended lease's egress log: it expires after `seconds`. */
  async retain(leaseId: string, seconds: number): Promise<void> {
    const multi = this.redis.multi();
    for (const key of [this.k.egress(leaseId, 'allowed'), this.k.egress(leaseId, 'denied'), this.k.egressDropped(leaseId)])
      multi.expire(key, seconds);
    await multi.exec();
  }
}
