/**
 * The agent's end of its lease's inbox (contract/queue.ts): reads the stream through the consumer
 * group, hands each entry to its handler in stream order with at most `capacity` calls at once,
 * and acknowledges and deletes an entry once its handler is done — for a call, once its result
 * is on the return stream.
 *
 * An entry handed over and not acknowledged is read again: at start (an earlier agent's) and
 * after the blocking connection came back (a reply lost with the connection). A call among them
 * that had begun is answered `effect_unknown` by the runner (its attempt marker), never run
 * twice; one running in this agent now is not handed over again.
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
  /** XREADGROUP of entries not handed over yet (`>`), up to `count`, blocking until one comes (a connection of its own). */
  readNew(count: number): Promise<InboxEntry[]>;
  /** XREADGROUP of entries handed to this consumer and not acknowledged (`0`): never blocks. */
  readUnacknowledged(count: number): Promise<InboxEntry[]>;
  /** XACK and XDEL of `id`, one round trip. */
  done(id: string): Promise<void>;
}

/** What the entries are handed to. A handler that throws leaves its entry unacknowledged. */
export interface InboxHandlers {
  call(message: unknown): Promise<void>;
  bind(message: unknown): Promise<void>;
}

/** Most unacknowledged entries read again at once. */
const UNACKNOWLEDGED_BATCH = 1000;
/** Pause after a failed read before the next, ms (the connection retries by itself meanwhile). */
const READ_RETRY_MS = 250;

export class Inbox {
  /** Ids of entries handed to a handler and not acknowledged yet. */
  private readonly inFlight = new Set<string>();
  private readonly running = new Set<Promise<void>>();
  private freed: (() => void) | null = null;
  private stopped = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly connection: InboxConnection,
    private readonly handlers: InboxHandlers,
    /** Calls handed over at once (SBX_AGENT_CONCURRENCY). */
    private readonly capacity: number,
    private readonly log: Logger,
  ) {}

  /** Creates the group and hands over what an earlier agent left unacknowledged; then reads on in the background. */
  async start(): Promise<void> {
    await this.connection.createGroup();
    await this.recover();
    this.loop = this.readLoop();
  }

  /**
   * Hands over again the entries this consumer was given and did not acknowledge, except those
   * running here (call it after the blocking connection reconnected).
   */
  async recover(): Promise<void> {
    const entries = await this.connection.readUnacknowledged(UNACKNOWLEDGED_BATCH);
    for (const entry of entries) if (!this.inFlight.has(entry[0])) await this.dispatch(entry);
  }

  /** Stops reading (the caller closes the blocking connection) and waits for the calls handed over to end. */
  async stop(): Promise<void> {
    this.stopped = true;
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
      let entries: InboxEntry[];
      try {
        entries = await this.connection.readNew(this.capacity - this.running.size);
      } catch (err) {
        if (this.stopped) return;
        this.log.warn({ err }, 'reading the inbox failed; reading again');
        await new Promise((r) => setTimeout(r, READ_RETRY_MS));
        continue;
      }
      for (const entry of entries) await this.dispatch(entry);
    }
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
      await this.settle(id, this.handlers.bind(parsed.message));
      return;
    }
    const run = this.settle(id, this.handlers.call(parsed.message)).finally(() => {
      this.running.delete(run);
      this.freed?.();
      this.freed = null;
    });
    this.running.add(run);
  }

  private async settle(id: string, handled: Promise<void>): Promise<void> {
    try {
      await handled;
      await this.acknowledge(id);
    } catch (err) {
      // Left unacknowledged: read again after a reconnect or by the next agent, whose attempt start decides.
      this.log.error({ err, entryId: id }, 'an inbox entry could not be handled');
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
    readNew: async (count) =>
      entriesOf(await reader.xreadgroup('GROUP', INBOX_GROUP, INBOX_GROUP, 'COUNT', count, 'BLOCK', 0, 'STREAMS', inbox, '>')),
    readUnacknowledged: async (count) =>
      entriesOf(await commands.xreadgroup('GROUP', INBOX_GROUP, INBOX_GROUP, 'COUNT', count, 'STREAMS', inbox, '0')),
    done: async (id) => void (await commands.pipeline().xack(inbox, INBOX_GROUP, id).xdel(inbox, id).exec()),
  };
}
