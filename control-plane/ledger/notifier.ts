/**
 * Wakes up waiters (SSE streams, `?wait=` long-polls) when the ledger changes a call. One Redis
 * subscriber connection per control-plane process listens on the ledger's notify pattern, so a
 * call finished through another process wakes this one's clients too.
 */
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';

export class CallNotifier {
  private readonly emitter = new EventEmitter();

  private constructor(private readonly subscriber: Redis) {
    this.emitter.setMaxListeners(0);
    subscriber.on('pmessage', (_pattern: string, channel: string) => this.emitter.emit(channel));
  }

  /** Subscribes `subscriber` (a connection of its own: it enters subscribe mode) to `pattern`. */
  static async start(subscriber: Redis, pattern: string): Promise<CallNotifier> {
    await subscriber.psubscribe(pattern);
    return new CallNotifier(subscriber);
  }

  /**
   * Resolves on the next notification on `channel`, after `timeoutMs`, or when `signal` aborts,
   * whichever comes first. Callers re-read the ledger afterwards; a notification carries no data.
   */
  next(channel: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.emitter.off(channel, done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.emitter.once(channel, done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  async close(): Promise<void> {
    this.subscriber.disconnect();
  }
}
