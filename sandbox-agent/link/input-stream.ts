/**
 * The agent's end of a call's input stream (`LeaseKeys.input(callId)`, contract/queue.ts): reads
 * the control plane's `InputMessage`s in stream order with XREAD BLOCK on a connection of its own
 * (a blocking read would stall every other command of a shared one) and hands each to the call.
 * Used by `terminal` (keystrokes, resizes) and by `exec` with `stdin: "pipe"`.
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
  /** Deletes the stream (the call ended; nothing more will be read). */
  remove(key: string): Promise<void>;
  /** Closes the connection, ending a pending read. */
  close(): void;
}

/** Opens a call's input stream: `onMessage` gets each message in order until the returned `close()`. */
export type OpenInput = (callId: string, onMessage: (message: InputMessage) => void) => { close(): Promise<void> };

/**
 * An `OpenInput` over Redis: `connect()` gives a fresh connection per opened stream, `keyOf`
 * names the stream. A malformed entry is skipped (the control plane validates before XADD).
 */
export function redisInput(connect: () => BlockingConnection, keyOf: (callId: string) => string): OpenInput {
  return (callId, onMessage) => {
    const key = keyOf(callId);
    const conn = connect();
    let closed = false;
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
          if (parsed?.success && !closed) onMessage(parsed.data);
        }
      }
    })();
    return {
      close: async () => {
        if (closed) return;
        closed = true;
        conn.close();
        await loop;
        await conn.remove(key).catch(() => undefined);
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
