/**
 * Wakes up waiters (SSE streams, `?wait=` long-polls, a release waiting for open calls) when a
 * store publishes a change. One Redis subscriber connection per control-plane process listens on
 * one pattern, so a change made through another process wakes this one's waiters too. A
 * notification carries no data: waiters re-read the store.
 */
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';

export class Notifier {
  private readonly emitter = new EventEmitter();

  private constructor(private readonly subscriber: Redis) {
    this.emitter.setMaxListeners(0);
    subscriber.on('pmessage', (_pattern: string, channel: string, message: string) => this.emitter.emit(channel, message));
  }

  /** Subscribes `subscriber` (a connection of its own: it enters subscribe mode) to `pattern`. */
  static async start(subscriber: Redis, pattern: string): Promise<Notifier> {
    await subscriber.psubscribe(pattern);
    return new Notifier(subscriber);
  }

  /**
   * Resolves on the next notification on `channel`, after `timeoutMs`, or when `signal` aborts,
   * whichever comes first. Callers re-read the store afterwards. With `accept`, only a
   * notification whose message it accepts wakes the caller (e.g. `finished`, not every event's
   * seq), so a waiter for one transition does not re-read the store on every event.
   */
  next(channel: string, timeoutMs: number, signal?: AbortSignal, accept?: (message: string) => boolean): Promise<void> {
    return this.nextOf([channel], timeoutMs, signal, accept);
  }

  /** As `next`, on the first notification on any of `channels`. */
  nextOf(channels: readonly string[], timeoutMs: number, signal?: AbortSignal, accept?: (message: string) => boolean): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        for (const channel of channels) this.emitter.off(channel, onMessage);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const onMessage = (message?: string): void => {
        if (!accept || (message !== undefined && accept(message))) done();
      };
      const timer = setTimeout(done, timeoutMs);
      for (const channel of channels) this.emitter.on(channel, onMessage);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  async close(): Promise<void> {
    this.subscriber.disconnect();
  }
}
