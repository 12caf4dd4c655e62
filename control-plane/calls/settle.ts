/**
 * Settling a just-recorded call when Redis fails: the try behind the client's answer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';

/** How long a call recorded during a Redis outage is tried again to be settled, ms. */
export const SETTLE_RETRY_FOR_MS = 10 * 60_000;

/** Longest pause between two tries, ms (the pauses double from 250 ms). */
const MAX_PAUSE_MS = 5000;

/**
 * Runs `settleCall`, which brings a just-recorded call to its end state. When Redis fails it
 * too (an outage: why the submission failed), it is tried again behind the client's answer
 * until it succeeds or `retryForMs` passed, so the record does not stay `queued` with no job (a
 * release would still end it, as `cancelled`). `settleCall` must be safe to repeat. Never
 * throws; resolves with what the first try returned, or undefined when it failed (the tries
 * behind the answer go on). `ids` ({sandboxId, callId}) go into each log line.
 */
export async function settleBehindAnswer<T>(
  log: Logger,
  ids: { sandboxId: string; callId: string },
  settleCall: () => Promise<T>,
  retryForMs = SETTLE_RETRY_FOR_MS,
): Promise<T | undefined> {
  try {
    return await settleCall();
  } catch (err) {
    log.warn({ err, ...ids }, 'settling a call failed; trying again in the background');
  }
  void (async () => {
    const deadline = Date.now() + retryForMs;
    for (let delayMs = 250; Date.now() < deadline; delayMs = Math.min(delayMs * 2, MAX_PAUSE_MS)) {
      await sleep(delayMs, undefined, { ref: false });
      try {
        await settleCall();
        return;
      } catch (err) {
        log.warn({ err, ...ids }, 'settling a call failed; trying again');
      }
    }
    log.error(ids, 'a call recorded during an outage could not be settled; its release will end it');
  })();
  return undefined;
}
