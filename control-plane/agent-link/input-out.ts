/**
 * Input to a running call, control plane → agent, in order: one Redis stream per call
 * (`LeaseKeys.input(callId)`, contract/queue.ts) that the agent reads with XREAD BLOCK. Carries a
 * terminal's keystrokes, resizes and EOF, and the piped stdin of an exec (`stdin: "pipe"`).
 * The stream is in the lease's namespace: it goes with the lease (`AgentLink.destroy`), and the
 * agent deletes it when the call ends.
 */
import type { Redis } from 'ioredis';
import { INPUT_FIELD, leaseKeys, type InputMessage } from '../../contract/queue.js';

/** Entries kept unread per stream at most (approximate trim): a client far ahead of the agent loses the oldest. */
const MAX_PENDING_ENTRIES = 100_000;

export class InputOut {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
  ) {}

  /** Appends `messages` to the call's input stream, in order (one round trip). */
  async send(leaseId: string, callId: string, messages: readonly InputMessage[]): Promise<void> {
    const key = leaseKeys(this.rootPrefix, leaseId).input(callId);
    const multi = this.redis.multi();
    for (const m of messages) multi.xadd(key, 'MAXLEN', '~', MAX_PENDING_ENTRIES, '*', INPUT_FIELD, JSON.stringify(m));
    const replies = (await multi.exec()) ?? [];
    const failed = replies.find(([err]) => err);
    if (failed) throw failed[0];
  }

  /** Records that the call's stdin was closed (`eof`); true for the first close, false when it was closed already. */
  async markStdinClosed(leaseId: string, callId: string): Promise<boolean> {
    const key = `${leaseKeys(this.rootPrefix, leaseId).namespace}:stdin-closed:${callId}`;
    return (await this.redis.set(key, '1', 'NX')) === 'OK';
  }

  /** Whether the call's stdin was closed (`eof`) already. */
  async stdinClosed(leaseId: string, callId: string): Promise<boolean> {
    return (await this.redis.exists(`${leaseKeys(this.rootPrefix, leaseId).namespace}:stdin-closed:${callId}`)) === 1;
  }
}
