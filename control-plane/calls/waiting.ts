/**
 * Waiting on a lease's calls by their notifications (each wait listens before it reads, so no
 * change is missed), not on a timer.
 */
import type { CallView } from '../../contract/objects.js';
import type { Notifier } from '../redis/notifier.js';
import { CALL_SETTLED, type CallStore } from './store.js';

/** What the waits read: the calls' statuses and notify channels, the notifier, the clock. */
export interface WaitDeps {
  store: Pick<CallStore, 'openCalls' | 'notifyChannel'>;
  notifier: Pick<Notifier, 'next' | 'nextOf'>;
  now: () => Date;
}

/** Longest single wait on calls' notifications before they are read again, ms (a bound, not a poll: notifications wake it sooner). */
const WAIT_RECHECK_MS = 1000;

/**
 * Resolves once none of the lease's calls is open, or at `untilMs` (epoch ms, by `now`),
 * whichever comes first. Waits on the calls' notifications (each wait listens before it
 * reads, so no change is missed), not on a timer.
 */
export async function waitAllFinished(deps: WaitDeps, leaseId: string, untilMs: number): Promise<void> {
  const { store, notifier, now } = deps;
  let open = await store.openCalls(leaseId);
  while (open.length > 0 && now().getTime() < untilMs) {
    // Listen on the open calls first, then read again: a call ending in between still wakes the wait.
    const stop = new AbortController();
    const channels = open.map((callId) => store.notifyChannel(leaseId, callId));
    const wake = notifier.nextOf(
      channels,
      Math.max(0, Math.min(WAIT_RECHECK_MS, untilMs - now().getTime())),
      stop.signal,
      (message) => message === CALL_SETTLED.finished,
    );
    const current = await store.openCalls(leaseId);
    const unchanged = current.length === open.length && current.every((id) => open.includes(id));
    if (unchanged) await wake;
    else stop.abort();
    open = current;
  }
}

/** A wait begun before the call's record was written (`listenForEnd`): its first wake, and how to stop it. */
export interface EarlyWait {
  wake: Promise<void>;
  stop: () => void;
}

/**
 * Starts listening for a call's end before it exists (its submission is about to write it): the
 * first round of `waitFinished` then needs no read of what the submission just wrote. `stop`
 * when the submission fails.
 */
export function listenForEnd(deps: WaitDeps, leaseId: string, callId: string, timeoutMs: number): EarlyWait {
  const stopped = new AbortController();
  const wake = deps.notifier.next(
    deps.store.notifyChannel(leaseId, callId),
    Math.max(0, Math.min(WAIT_RECHECK_MS, timeoutMs)),
    stopped.signal,
    settlesOf(false),
  );
  return { wake, stop: () => stopped.abort() };
}

/** Which notify messages end a wait: the end, and a detach unless `untilFinished`. */
function settlesOf(untilFinished: boolean): (message: string) => boolean {
  // Only the end (or a detach) wakes the wait: the events before it change nothing it returns.
  return (message) => message === CALL_SETTLED.finished || (message === CALL_SETTLED.detached && !untilFinished);
}

/**
 * The call once finished or detached (a background task's handle; with `untilFinished`, only
 * once finished), or as it is after `timeoutMs`. `early`: a listener started before the call
 * was written and the call as written then (`listenForEnd`): its first round reads nothing.
 */
export async function waitFinished(
  deps: WaitDeps & { get(leaseId: string, callId: string): Promise<CallView> },
  leaseId: string,
  callId: string,
  timeoutMs: number,
  untilFinished = false,
  early?: { wait: EarlyWait; call: CallView },
): Promise<CallView> {
  const deadline = Date.now() + timeoutMs;
  const channel = deps.store.notifyChannel(leaseId, callId);
  const settles = settlesOf(untilFinished);
  let first = early;
  for (;;) {
    // Listen before reading, so a change between the read and the wait is not missed.
    const wake =
      first?.wait.wake ?? deps.notifier.next(channel, Math.max(0, Math.min(WAIT_RECHECK_MS, deadline - Date.now())), undefined, settles);
    const call = first?.call ?? (await deps.get(leaseId, callId));
    first = undefined;
    // A call waiting for approval is answered as it is: it waits for a person, not for a process.
    const settled = call.status === 'finished' || call.status === 'pending_approval' || (call.status === 'detached' && !untilFinished);
    if (settled || Date.now() >= deadline) return call;
    await wake;
  }
}
