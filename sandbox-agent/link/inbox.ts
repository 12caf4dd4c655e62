/**
 * The agent's end of its lease's inbox (contract/queue.ts): reads the stream through the consumer
 * group, hands each entry to its handler in stream order with at most `capacity` calls at once,
 * and acknowledges and deletes an entry once its handler is done — for a call, once its result
 * is on the return stream.
 *
 * An entry handed over and not acknowledged is read again: at start (an earlier agent's), after
 * the blocking connection came back (a reply lost with the connection), and after a pause when
 * its handler failed. A call among them that had begun is answered `effect_unknown` by the
 * runner (its attempt marker), never run twice; one queued or running in this agent now is not
 * handed over again. Reading, re-reading and handing over are one loop, so none races another,
 * and re-read entries wait for a free slot like new ones.
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { INBOX_FIELDS, INBOX_GROUP, type InboxKind } from '../../contract/queue.js';

/** An entry as XREADGROUP returns it: id and field-value pairs (null: deleted since it was handed over). */
export type InboxEntry = [id: string, fields: string[] | null];

/** The Redis commands the inbox needs (`redisInboxConnection`; tests may pass their own). */
export interface InboxConnection {
  /** XGROUP CREATE of the consumer group at `0` (MKSTREAM); resolves also when it exists (BUSYGROUP). */
  createGroup(): Promise<void>;
  /** XREADGROUP of entries not handed over yet (`>`), up to `count`, blocking up to `blockMs` ([] then; a connection of its own). */
  readNew(count: number, blockMs: number): Promise<InboxEntry[]>;
  /** XREADGROUP of entries handed to this consumer and not acknowledged (`0`): never blocks. */
  readUnacknowledged(count: number): Promise<InboxEntry[]>;
  /** XACK and XDEL of `id`, one round trip. */
  done(id: string): Promise<void>;
}

/**
 * What the entries are handed to. `call` resolves false when it did not take the call (a copy
 * of one running now): its entry is then left to that run. A handler that throws leaves its
 * entry unacknowledged; it is read again after a pause.
 */
export interface InboxHandlers {
  call(message: unknown): Promise<boolean>;
  bind(message: unknown): Promise<void>;
}

/** Most unacknowledged entries read again at once. */
const UNACKNOWLEDGED_BATCH = 1000;
/**
 * Longest a blocking read waits, ms: then the loop looks again at what it owes (a reconnect's
 * or a failed handler's re-read). One idle command per sandbox per period.
 */
const READ_BLOCK_MS = 5000;
/** Pause after a failed read before the next, ms (the connection retries by itself meanwhile). */
const READ_RETRY_MS = 250;
/** First and longest pause before an entry whose handler failed is read again, ms. */
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;

export class Inbox {
  /** Ids of entries handed to a handler and not acknowledged yet. */
  private readonly inFlight = new Set<string>();
  /** Entries read and not handed over yet (no free slot), in stream order, by id. */
  private readonly backlog = new Map<string, InboxEntry>();
  private readonly running = new Set<Promise<void>>();
  private freed: (() => void) | null = null;
  private stopped = false;
  /**
   * Ends the blocking read under way with no entries (stop() begins: a read pending on a
   * connection that cannot reconnect never settles by itself). One per read: a long-lived
   * promise raced by every read would keep each read's entries reachable until it settles.
   */
  private endRead: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  /** Whether the unacknowledged entries are to be read again: at start, and after a reconnect. */
  private recoveryDue = true;
  /** When they are to be read again because a handler failed (epoch ms; 0: not), and the pause after the next failure. */
  private retryAtMs = 0;
  private retryPauseMs = RETRY_FIRST_MS;

  constructor(
    private readonly connection: InboxConnection,
    private readonly handlers: InboxHandlers,
    /** Calls handed over at once (SBX_AGENT_CONCURRENCY). */
    private readonly capacity: number,
    private readonly log: Logger,
  ) {}

  /** Creates the group and starts reading; what an earlier agent left unacknowledged is handed over first. */
  async start(): Promise<void> {
    await this.connection.createGroup();
    this.loop = this.readLoop();
  }

  /** Has the unacknowledged entries read again (call it when the blocking connection reconnected: a reply may have been lost). */
  requestRecovery(): void {
    this.recoveryDue = true;
  }

  /** Stops reading (the caller closes the blocking connection) and waits for the calls handed over to end. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.endRead?.();
    this.freed?.();
    await this.loop;
    await Promise.allSettled([...this.running]);
  }

  private async readLoop(): Promise<void> {
    while (!this.stopped) {
      if (this.running.size >= this.capacity) {
        await new Promise<void>((resolve) => (this.freed = resolve));
        continue;
      }
      try {
        if (this.recoveryDue || (this.retryAtMs > 0 && Date.now() >= this.retryAtMs)) {
          this.recoveryDue = false;
          this.retryAtMs = 0;
          this.take(await this.connection.readUnacknowledged(UNACKNOWLEDGED_BATCH));
        }
        if (this.backlog.size === 0) {
          const read = this.connection.readNew(this.capacity - this.running.size, READ_BLOCK_MS);
          // Left behind when stop() wins the race; its rejection (the closed connection) is expected.
          read.catch(() => undefined);
          const entries = this.stopped
            ? []
            : await Promise.race([read, new Promise<InboxEntry[]>((resolve) => (this.endRead = () => resolve([])))]);
          this.endRead = null;
          if (this.stopped) return;
          this.take(entries);
        }
        for (const [id, entry] of this.backlog) {
          if (this.stopped || this.running.size >= this.capacity) break;
          this.backlog.delete(id);
          await this.dispatch(entry);
        }
      } catch (err) {
        if (this.stopped) return;
        // The group is gone (a Redis that lost it): made again, and what it held is read again.
        if (String((err as Error).message).includes('NOGROUP')) {
          await this.connection.createGroup().catch(() => undefined);
          this.recoveryDue = true;
        }
        this.log.warn({ err }, 'reading the inbox failed; reading again');
        await new Promise((r) => setTimeout(r, READ_RETRY_MS));
      }
    }
  }

  /** Queues what was read, leaving out what is queued or running already (a re-read returns those too). */
  private take(entries: InboxEntry[]): void {
    for (const entry of entries) if (!this.inFlight.has(entry[0])) this.backlog.set(entry[0], entry);
  }

  /** A binding is handled before the next entry is looked at; a call runs beside the others. */
  private async dispatch([id, fields]: InboxEntry): Promise<void> {
    const parsed = fields ? parseEntry(fields) : null;
    if (!parsed) {
      // Deleted since it was handed over, or not an entry an agent can act on: nothing to run.
      if (fields) this.log.error({ entryId: id }, 'dropped an inbox entry that is not a call or a binding');
      await this.acknowledge(id);
      return;
    }
    this.inFlight.add(id);
    if (parsed.kind === 'bind') {
      await this.settle(
        id,
        this.handlers.bind(parsed.message).then(() => true),
      );
      return;
    }
    const run = this.settle(id, this.handlers.call(parsed.message)).finally(() => {
      this.running.delete(run);
      this.freed?.();
      this.freed = null;
    });
    this.running.add(run);
  }

  private async settle(id: string, handled: Promise<boolean>): Promise<void> {
    try {
      if (await handled) await this.acknowledge(id);
      this.retryPauseMs = RETRY_FIRST_MS;
    } catch (err) {
      // Left unacknowledged and read again after a pause; the attempt marker decides what a re-read call does.
      this.log.error({ err, entryId: id }, 'an inbox entry could not be handled; it is read again');
      if (this.retryAtMs === 0) this.retryAtMs = Date.now() + this.retryPauseMs;
      this.retryPauseMs = Math.min(this.retryPauseMs * 2, RETRY_MAX_MS);
    } finally {
      this.inFlight.delete(id);
    }
  }

  private async acknowledge(id: string): Promise<void> {
    await this.connection.done(id).catch((err: unknown) => this.log.warn({ err, entryId: id }, 'acknowledging an inbox entry failed'));
  }
}

function parseEntry(fields: string[]): { kind: InboxKind; message: unknown } | null {
  const values = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) values.set(fields[i]!, fields[i + 1]!);
  const kind = values.get(INBOX_FIELDS.kind);
  const text = values.get(INBOX_FIELDS.message);
  if ((kind !== 'call' && kind !== 'bind') || text === undefined) return null;
  try {
    return { kind, message: JSON.parse(text) as unknown };
  } catch {
    return null;
  }
}

/**
 * `InboxConnection` over ioredis: `commands` is the agent's shared connection, `reader` one for
 * the blocking reads alone (a blocked XREADGROUP holds its connection), `inbox` the stream key.
 */
export function redisInboxConnection(commands: Redis, reader: Redis, inbox: string): InboxConnection {
  const entriesOf = (reply: unknown): InboxEntry[] => (reply as [string, InboxEntry[]][] | null)?.[0]?.[1] ?? [];
  return {
    createGroup: async () => {
      try {
        await commands.xgroup('CREATE', inbox, INBOX_GROUP, '0', 'MKSTREAM');
      } catch (err) {
        if (!String((err as Error).message).startsWith('BUSYGROUP')) throw err;
      }
    },
    readNew: async (count, blockMs) =>
      entriesOf(await reader.xreadgroup('GROUP', INBOX_GROUP, INBOX_GROUP, 'COUNT', count, 'BLOCK', blockMs, 'STREAMS', inbox, '>')),
    readUnacknowledged: async (count) =>
      entriesOf(await commands.xreadgroup('GROUP', INBOX_GROUP, INBOX_GROUP, 'COUNT', count, 'STREAMS', inbox, '0')),
    done: async (id) => {
      // A pipeline answers each command on its own: a failed one is thrown, not lost.
      const failed = ((await commands.pipeline().xack(inbox, INBOX_GROUP, id).xdel(inbox, id).exec()) ?? []).find(([err]) => err);
      if (failed) throw failed[0];
    },
  };
}
