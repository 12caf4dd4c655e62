/**
 * The agent's end of a call's input stream (`LeaseKeys.input(callId)`, contract/queue.ts): reads
 * the control plane's `InputMessage`s in stream order with XREAD BLOCK on a connection of its own
 * (a blocking read would stall every other command of a shared one) and hands each to the call.
 * Used by `terminal` (keystrokes, resizes) and by `exec` with `stdin: "pipe"`.
 *
 * Piped stdin is paced: its handler returns a promise that settles once the process's pipe took
 * the bytes; the next entry is read only then, and the bytes are given back to the call's stdin
 * budget (`LeaseKeys.inputPending`, which the control plane charges before it appends). So what a
 * process does not read stays in Redis, bounded by that budget, not in the agent's memory.
 */
import { INPUT_FIELD, InputMessage } from '../../contract/queue.js';

/** How long one XREAD blocks before the loop checks whether it was closed, ms. */
const BLOCK_MS = 5000;

/** One entry of a stream: its id and its flat field/value list. */
export type StreamEntry = [id: string, fields: string[]];

/** A connection that may block (main.ts makes one per open stream from the agent's Redis options). */
export interface BlockingConnection {
  /** XREAD BLOCK `blockMs` COUNT 100 STREAMS `key` `afterId`: the entries after `afterId`, or [] on timeout. */
  readAfter(key: string, afterId: string, blockMs: number): Promise<StreamEntry[]>;
  /** Subtracts `bytes` from the counter at `key` (stdin the process's pipe took). */
  consumed(key: string, bytes: number): Promise<void>;
  /** Deletes the stream and its counter (the call ended; nothing more will be read). */
  remove(...keys: string[]): Promise<void>;
  /** Closes the connection, ending a pending read. */
  close(): void;
}

/**
 * Opens a call's input stream: `onMessage` gets each message in order until the returned
 * `close()`. A handler that returns a promise paces the stream (above): the next message waits
 * for it, and a `data` message's bytes are then subtracted from the call's stdin budget.
 */
export type OpenInput = (callId: string, onMessage: (message: InputMessage) => void | Promise<void>) => { close(): Promise<void> };

/**
 * An `OpenInput` over Redis: `connect()` gives a fresh connection per opened stream, `keyOf`
 * names the stream and `pendingKeyOf` its stdin budget counter. A malformed entry is skipped (the
 * control plane validates before XADD).
 */
export function redisInput(
  connect: () => BlockingConnection,
  keyOf: (callId: string) => string,
  pendingKeyOf: (callId: string) => string,
): OpenInput {
  return (callId, onMessage) => {
    const key = keyOf(callId);
    const pendingKey = pendingKeyOf(callId);
    const conn = connect();
    let closed = false;
    // A paced write the process never takes (it stopped reading) must not hold close().
    let stop = (): void => undefined;
    const stopped = new Promise<void>((resolve) => (stop = resolve));
    const loop = (async () => {
      let lastId = '0-0';
      while (!closed) {
        let entries: StreamEntry[];
        try {
          entries = await conn.readAfter(key, lastId, BLOCK_MS);
        } catch {
          if (closed) return;
          // A dropped connection reconnects by itself (ioredis); try again shortly.
          await new Promise((r) => setTimeout(r, 200));
          continue;
        }
        for (const [id, fields] of entries) {
          lastId = id;
          const at = fields.indexOf(INPUT_FIELD);
          const parsed = at >= 0 ? InputMessage.safeParse(safeJson(fields[at + 1] ?? '')) : null;
          if (!parsed?.success || closed) continue;
          const paced = onMessage(parsed.data);
          if (!(paced instanceof Promise)) continue;
          await Promise.race([paced, stopped]);
          if (closed) return;
          if (parsed.data.kind === 'data')
            await conn.consumed(pendingKey, Buffer.byteLength(parsed.data.dataBase64, 'base64')).catch(() => undefined);
        }
      }
    })();
    return {
      close: async () => {
        if (closed) return;
        closed = true;
        stop();
        conn.close();
        await loop;
        await conn.remove(key, pendingKey).catch(() => undefined);
      },
    };
  };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
