/**
 * What comes back from a lease's agent: its return stream (`LeaseKeys.returns`: events,
 * results, artifact chunks; contract/queue.ts). One blocking XREAD per control-plane process
 * reads the streams of every lease it consumes; each lease's messages are handed on one at a
 * time in stream order, and an entry is deleted once handled. One process at a time consumes a
 * lease (the consumer lock). The handler is the composition root's: returns meet calls there,
 * not in leases/.
 */
import { Redis, ReplyError, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import { ReturnMessage, decodeReturn, leaseKeys } from '../../contract/queue.js';
import type { RedisLock } from '../redis/lock.js';
import type { Liveness } from './liveness.js';

export type ReturnHandler = (leaseId: string, message: ReturnMessage) => Promise<void>;

/** A consumer lock lives this long without renewal, ms. */
const LOCK_MS = 15_000;
/** Renewal period of consumer locks, ms. */
const RENEW_MS = 5_000;
/** Poll period while draining a return stream, ms (Redis has no event for "stream empty"). */
const DRAIN_POLL_MS = 25;
/** Entries read ahead per lease: past it the lease is left out of the read until its handler caught up. */
const READ_AHEAD = 64;
/** The longest one blocking read waits before it looks at the set of leases again, ms (new leases wake it at once). */
const BLOCK_MS = 5_000;
/** First and longest wait before a message whose handling failed (Redis, disk) is handled again, ms. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2_000;
/** Tries of a message other than a result before it is dropped (a result is tried for as long as the lease is consumed). */
const MAX_TRIES = 10;

interface Entry {
  id: string;
  fields: Buffer[];
}

/** One consumed lease: where its reading stands and what waits for its handler. */
interface Consumed {
  leaseId: string;
  key: string;
  /** The id of the last entry read (XREAD continues after it). */
  lastId: string;
  backlog: Entry[];
  /** Left out of a read because its backlog was full: its handler wakes the reader once it caught up. */
  excluded: boolean;
  /** Handled entries whose delete failed: deleted with the next ones. */
  undeleted: string[];
  /** The handler's run over the backlog, while one goes on. */
  running: Promise<void> | null;
  stopped: boolean;
}

export class ReturnsIn {
  private readonly consumed = new Map<string, Consumed>();
  private readonly byKey = new Map<string, Consumed>();
  private renewer: NodeJS.Timeout | null = null;
  /** The blocking connection of the reader, while it runs. */
  private reader: Redis | null = null;
  private readerLoop: Promise<void> | null = null;
  private closed = false;
  /**
   * Ends the read under way with null (close() begins: a read pending on a connection that
   * cannot reconnect never settles by itself). One per read, not one promise raced by every
   * read: a long-lived promise in Promise.race keeps each read's reply (its chunks' bytes)
   * reachable until it settles, which a run of artifacts showed as memory growing without end.
   */
  private endRead: (() => void) | null = null;
  /**
   * This process's wake-up stream: the reader also waits on it, so an entry appended there (a
   * lease to consume, a lease whose handler caught up) ends its blocking read at once — also
   * when the entry arrives before the read does.
   */
  private readonly wakeKey: string;
  private wakeId = '0-0';
  private readonly lockLostListeners: Array<(leaseId: string) => void> = [];

  constructor(
    private readonly redis: Redis,
    private readonly options: RedisOptions,
    private readonly rootPrefix: string,
    private readonly lock: RedisLock,
    private readonly liveness: Pick<Liveness, 'processId' | 'isAlive'>,
    private readonly handler: ReturnHandler,
    private readonly log: Logger,
    /** `blockMs`: the longest one blocking read waits (tests set it long, to prove nothing depends on its end). */
    private readonly tuning: { blockMs: number } = { blockMs: BLOCK_MS },
  ) {
    this.wakeKey = `${rootPrefix}returns-wake:${liveness.processId}`;
  }

  /**
   * Starts consuming the lease's return stream, unless another control-plane process does:
   * exactly one process holds a lease's consumer lock (`<prefix>consumer:<leaseId>`, renewed
   * every RENEW_MS, lost after LOCK_MS), so messages are ledgered one at a time in the order the
   * agent sent them — with two consumers, a result could overtake the output events before it.
   * A lock whose holder's liveness key is gone (it crashed) is taken over at once, and its
   * entries not yet deleted are handled again (ledgering is idempotent).
   * Idempotent; returns whether this process consumes. Messages that fail the schema are
   * dropped and logged.
   */
  async start(leaseId: string): Promise<boolean> {
    if (this.consumed.has(leaseId)) return true;
    const key = this.lockKey(leaseId);
    const me = this.liveness.processId;
    if (!(await this.lock.acquire(key, me, LOCK_MS))) {
      const holder = await this.lock.holder(key);
      // A lock still held by this very process (a stop whose release failed) is this process's.
      const mine = holder === me;
      const orphaned =
        holder !== null && !mine && !(await this.liveness.isAlive(holder)) && (await this.lock.steal(key, holder, me, LOCK_MS));
      if (!mine && !orphaned) return false;
    }
    if (this.consumed.has(leaseId) || this.closed) return !this.closed;
    const lease: Consumed = {
      leaseId,
      key: leaseKeys(this.rootPrefix, leaseId).returns,
      lastId: '0-0',
      backlog: [],
      excluded: false,
      undeleted: [],
      running: null,
      stopped: false,
    };
    this.consumed.set(leaseId, lease);
    this.byKey.set(lease.key, lease);
    this.renewer ??= setInterval(() => void this.renewLocks(), RENEW_MS).unref();
    this.readerLoop ??= this.read();
    await this.wake();
    return true;
  }

  /** Extends this process's consumer locks; a lock found lost (this process was too slow) stops its consumer. */
  private async renewLocks(): Promise<void> {
    for (const leaseId of [...this.consumed.keys()]) {
      // A Redis error is not a lost lock: try again next round (the lock outlives three of them).
      const held = await this.lock.renew(this.lockKey(leaseId), this.liveness.processId, LOCK_MS).catch(() => null);
      if (held === false) {
        this.log.warn({ sandboxId: leaseId }, 'lost the consumer lock of a lease; another process consumes its returns now');
        await this.stop(leaseId);
        for (const listener of this.lockLostListeners) listener(leaseId);
      }
    }
  }

  /**
   * Calls `listener` with a lease whose consumer lock this process found lost (another process
   * consumes its returns now): what this process served for it (its egress proxy) is the other's.
   */
  onLockLost(listener: (leaseId: string) => void): void {
    this.lockLostListeners.push(listener);
  }

  /** Stops consuming (after the message in hand is handled) and gives up the consumer lock (idempotent). */
  async stop(leaseId: string): Promise<void> {
    const lease = this.consumed.get(leaseId);
    if (!lease) return;
    this.consumed.delete(leaseId);
    this.byKey.delete(lease.key);
    lease.stopped = true;
    await lease.running;
    await this.lock.release(this.lockKey(leaseId), this.liveness.processId).catch(() => undefined);
  }

  /**
   * Waits until the lease's return stream is empty (so what the agent sent before it stopped is
   * ledgered, by this process or the one holding the consumer lock), at most `timeoutMs`. No-op
   * when no process consumes the lease's returns.
   */
  async drain(leaseId: string, timeoutMs: number): Promise<void> {
    if (!this.consumed.has(leaseId) && !(await this.lock.held(this.lockKey(leaseId)))) return;
    const key = leaseKeys(this.rootPrefix, leaseId).returns;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if ((await this.redis.xlen(key)) === 0) return;
      await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
    }
  }

  /** The process (`Liveness.processId`) holding the lease's consumer lock, which serves its egress too; null when none does. */
  consumerOf(leaseId: string): Promise<string | null> {
    return this.lock.holder(this.lockKey(leaseId));
  }

  /** Lease ids this process consumes returns for. */
  active(): string[] {
    return [...this.consumed.keys()];
  }

  /** Stops every consumer, the reader and the lock renewal. */
  async close(): Promise<void> {
    this.closed = true;
    this.endRead?.();
    if (this.renewer) clearInterval(this.renewer);
    this.renewer = null;
    this.reader?.disconnect();
    await this.readerLoop;
    await Promise.allSettled(this.active().map((id) => this.stop(id)));
    await this.redis.del(this.wakeKey).catch(() => undefined);
  }

  /** Ends the reader's blocking read so that it reads the current set of leases. */
  private async wake(): Promise<void> {
    // Kept one entry long; it expires should this process die without closing.
    await this.redis.multi().xadd(this.wakeKey, 'MAXLEN', '1', '*', 'w', '1').pexpire(this.wakeKey, 3_600_000).exec();
  }

  /** The reader: one blocking XREAD over the wake-up stream and every consumed lease with room to read ahead. */
  private async read(): Promise<void> {
    this.reader = new Redis({ ...this.options, maxRetriesPerRequest: null });
    this.reader.on('error', () => undefined);
    let failures = 0;
    while (!this.closed) {
      const leases = [...this.consumed.values()];
      for (const l of leases) l.excluded = l.backlog.length >= READ_AHEAD;
      // The leases this read is for: a reply is theirs only while they are still the ones consumed
      // (a lease stopped and started again meanwhile reads from its stream's start instead).
      const listed = new Map(leases.filter((l) => !l.excluded).map((l) => [l.key, l]));
      const keys = [this.wakeKey, ...listed.keys()];
      const ids = [this.wakeId, ...[...listed.values()].map((l) => l.lastId)];
      let reply: [Buffer, [Buffer, Buffer[]][]][] | null;
      try {
        const pending = this.reader.xreadBuffer('COUNT', READ_AHEAD, 'BLOCK', this.tuning.blockMs, 'STREAMS', ...keys, ...ids) as Promise<
          typeof reply
        >;
        // Left behind when close() wins the race; its rejection then is expected.
        pending.catch(() => undefined);
        reply = this.closed ? null : await Promise.race([pending, new Promise<null>((resolve) => (this.endRead = () => resolve(null)))]);
        this.endRead = null;
        failures = 0;
      } catch (err) {
        if (this.closed) break;
        failures += 1;
        if (failures === 1) this.log.warn({ err }, 'reading the return streams failed; retrying');
        if (err instanceof ReplyError) await this.dropBrokenStreams([...listed.values()]);
        await new Promise((r) => setTimeout(r, Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** failures)));
        continue;
      }
      for (const [keyBuffer, entries] of reply ?? []) {
        const key = keyBuffer.toString();
        const last = entries.at(-1);
        if (!last) continue;
        if (key === this.wakeKey) {
          this.wakeId = last[0].toString();
          continue;
        }
        const lease = listed.get(key);
        // Stopped (and perhaps started again) while the read was under way: the entries stay for whoever consumes the lease.
        if (!lease || lease.stopped || this.byKey.get(key) !== lease) continue;
        for (const [id, fields] of entries) lease.backlog.push({ id: id.toString(), fields });
        lease.lastId = last[0].toString();
        lease.running ??= this.handleBacklog(lease);
      }
    }
  }

  /**
   * After a read the server refused: a lease whose return key is not a stream (its agent may
   * write its own namespace, and one wrong type fails the read of every lease) stops being
   * consumed here, so that the other leases' returns go on.
   */
  private async dropBrokenStreams(leases: Consumed[]): Promise<void> {
    for (const lease of leases) {
      const type = await this.redis.type(lease.key).catch(() => 'stream');
      if (type === 'stream' || type === 'none') continue;
      this.log.error({ sandboxId: lease.leaseId, type }, 'the return key of a lease is not a stream; its returns are no longer read');
      await this.stop(lease.leaseId);
    }
  }

  /** Hands the lease's read entries to the handler one at a time, deleting each from its stream once handled. */
  private async handleBacklog(lease: Consumed): Promise<void> {
    try {
      while (lease.backlog.length > 0 && !lease.stopped && !this.closed) {
        const entry = lease.backlog[0]!;
        if (!(await this.handleEntry(lease, entry))) break;
        lease.backlog.shift();
        // Not awaited: the next entry need not wait for it. One that fails is tried again with the next.
        const ids = [...lease.undeleted.splice(0), entry.id];
        void this.redis.xdel(lease.key, ...ids).catch(() => lease.undeleted.push(...ids));
      }
    } finally {
      lease.running = null;
    }
    if (lease.stopped || this.closed) return;
    // Entries read while the last one was handled, or a lease the reader had left out: go on.
    if (lease.backlog.length > 0) lease.running = this.handleBacklog(lease);
    else if (lease.excluded) await this.wake().catch(() => undefined);
  }

  /**
   * One entry to the handler. A malformed message, and one the handler refuses with an AppError
   * (a chunk that does not match its sha256), is dropped and logged: handling it again cannot
   * change the answer. Any other failure (Redis, the disk) is retried with backoff: a result
   * (the receipt) for as long as the lease is consumed here, so a passing fault never drops
   * one; any other message MAX_TRIES times, then it is dropped and logged. Returns false
   * when the lease stopped being consumed before the entry was handled.
   */
  private async handleEntry(lease: Consumed, entry: Entry): Promise<boolean> {
    const parsed = ReturnMessage.safeParse(decodeReturn(entry.fields));
    if (!parsed.success) {
      this.log.warn(
        { sandboxId: lease.leaseId, entryId: entry.id, issues: parsed.error.issues },
        'dropped malformed message from sandbox agent',
      );
      return true;
    }
    for (let failures = 0; ; failures += 1) {
      try {
        await this.handler(lease.leaseId, parsed.data);
        return true;
      } catch (err) {
        if (err instanceof AppError) {
          this.log.warn({ sandboxId: lease.leaseId, entryId: entry.id, err }, 'dropped a message from sandbox agent the ledger refused');
          return true;
        }
        if (parsed.data.kind !== 'result' && failures + 1 >= MAX_TRIES) {
          this.log.error({ sandboxId: lease.leaseId, entryId: entry.id, err }, 'dropped a message from sandbox agent after failed tries');
          return true;
        }
        if (failures === 0 || failures % MAX_TRIES === 0)
          this.log.warn({ sandboxId: lease.leaseId, entryId: entry.id, err, tries: failures + 1 }, 'ledgering a message failed; retrying');
        await new Promise((r) => setTimeout(r, Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** failures)));
        if (lease.stopped || this.closed) return false;
      }
    }
  }

  private lockKey(leaseId: string): string {
    return `${this.rootPrefix}consumer:${leaseId}`;
  }
}
