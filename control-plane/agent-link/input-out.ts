/**
 * Input to a running call, control plane → agent, in order: one Redis stream per call
 * (`LeaseKeys.input(callId)`, contract/queue.ts) that the agent reads with XREAD BLOCK. Carries a
 * terminal's keystrokes, resizes and EOF, and the piped stdin of an exec (`stdin: "pipe"`).
 * The stream is in the lease's namespace: it goes with the lease (`AgentLink.destroy`), and the
 * agent deletes it when the call ends. Piped stdin is bounded (`sendStdin`): the agent reads it
 * only as fast as the process takes it, and gives the bytes back to a per-call budget.
 */
import type { Redis } from 'ioredis';
import { INPUT_FIELD, leaseKeys, type InputMessage } from '../../contract/queue.js';

/** Entries kept unread per stream at most (approximate trim): a client far ahead of the agent loses the oldest. */
const MAX_PENDING_ENTRIES = 100_000;

/**
 * Piped stdin, all or nothing: refused when stdin was closed (-1) or when `bytes` more would put
 * the call's pending bytes over the budget (-2); else the budget is charged, the data (if any)
 * and the eof (if asked) appended, and the close recorded. Returns {status, pendingBytes}.
 * KEYS: stream, pending counter, closed flag. ARGV: bytes, budget, data message ('' for none),
 * eof message ('' for none).
 */
const SEND_STDIN = `
local pending = tonumber(redis.call('GET', KEYS[2]) or '0')
if redis.call('EXISTS', KEYS[3]) == 1 then return {-1, pending} end
local bytes = tonumber(ARGV[1])
if bytes > 0 and pending + bytes > tonumber(ARGV[2]) then return {-2, pending} end
if ARGV[3] ~= '' then
  redis.call('INCRBY', KEYS[2], bytes)
  redis.call('XADD', KEYS[1], '*', '${INPUT_FIELD}', ARGV[3])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], '1')
  redis.call('XADD', KEYS[1], '*', '${INPUT_FIELD}', ARGV[4])
end
return {1, pending + bytes}`;

/** What `sendStdin` did: `sent`, or refused because stdin was `closed` or the budget is `full`. */
export interface StdinSend {
  outcome: 'sent' | 'closed' | 'full';
  /** Bytes queued for the process and not yet taken by its pipe (after the send when sent). */
  pendingBytes: number;
}

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

  /**
   * Appends piped stdin `data` (bytes, may be absent) and/or the `eof` to the call's input stream,
   * all or nothing and atomically with the checks: refused (`closed`) after an eof, refused
   * (`full`) when the bytes the process has not taken yet plus `data` would exceed `budgetBytes`.
   * Nothing is ever trimmed: what is accepted reaches the process in order.
   */
  async sendStdin(leaseId: string, callId: string, data: Buffer | null, eof: boolean, budgetBytes: number): Promise<StdinSend> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    const message = (m: InputMessage): string => JSON.stringify(m);
    const [status, pendingBytes] = (await this.redis.eval(
      SEND_STDIN,
      3,
      keys.input(callId),
      keys.inputPending(callId),
      `${keys.namespace}:stdin-closed:${callId}`,
      String(data?.length ?? 0),
      String(budgetBytes),
      data === null ? '' : message({ kind: 'data', dataBase64: data.toString('base64') }),
      eof ? message({ kind: 'eof' }) : '',
    )) as [number, number];
    return { outcome: status === 1 ? 'sent' : status === -1 ? 'closed' : 'full', pendingBytes };
  }
}
