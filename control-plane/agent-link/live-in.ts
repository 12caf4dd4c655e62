/**
 * A terminal's output as its agent writes it (`LeaseKeys.live(callId)`, `LiveOutput`), for the
 * WebSocket attach: one subscriber connection of this process (made at the first subscription)
 * fans each message out to the handlers of its channel. Best effort, ahead of the ledger: the
 * attach sends each byte once by its offset, whichever of this and the `output` events brings it first.
 */
import type { Redis } from 'ioredis';
import { leaseKeys, LiveOutput } from '../../contract/queue.js';

export type LiveHandler = (chunk: { offset: number; data: Buffer }) => void;

export class LiveIn {
  private subscriber: Redis | null = null;
  private readonly handlers = new Map<string, Set<LiveHandler>>();

  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  /** Calls `handler` with each live chunk of the call until the returned function is called. */
  async subscribe(leaseId: string, callId: string, handler: LiveHandler): Promise<() => Promise<void>> {
    const channel = leaseKeys(this.rootPrefix, leaseId).live(callId);
    const sub = this.connection();
    let set = this.handlers.get(channel);
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
      await sub.subscribe(channel);
    }
    set.add(handler);
    return async () => {
      const current = this.handlers.get(channel);
      if (!current) return;
      current.delete(handler);
      if (current.size === 0) {
        this.handlers.delete(channel);
        await sub.unsubscribe(channel).catch(() => undefined);
      }
    };
  }

  /** Closes the subscriber connection. */
  async close(): Promise<void> {
    this.handlers.clear();
    const sub = this.subscriber;
    this.subscriber = null;
    if (sub) await sub.quit().catch(() => sub.disconnect());
  }

  private connection(): Redis {
    if (this.subscriber) return this.subscriber;
    const sub = this.redis.duplicate();
    sub.on('message', (channel: string, text: string) => {
      const set = this.handlers.get(channel);
      if (!set) return;
      let parsed;
      try {
        parsed = LiveOutput.safeParse(JSON.parse(text));
      } catch {
        return;
      }
      if (!parsed.success) return;
      const chunk = { offset: parsed.data.offset, data: Buffer.from(parsed.data.dataBase64, 'base64') };
      for (const handler of set) handler(chunk);
    });
    sub.on('error', () => undefined);
    this.subscriber = sub;
    return sub;
  }
}
