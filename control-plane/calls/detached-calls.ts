/**
 * What the resources that are one long-lived call each have in common — a shell session (its
 * `session_start` call) and a terminal (its `terminal` call): the start waits until the call runs
 * detached or has ended, and the resource's state and pid are read off the call. Each domain
 * keeps its own records, limits, errors and routes.
 */
import type { CallView } from '../../contract/objects.js';
import type { CallService } from './service.js';

/** How long a start waits for the call's program (a shell, a terminal's program) to run, ms. */
export const START_WAIT_MS = 30_000;

/** Where a detached call's resource stands: `ended` once its call finished. */
export type DetachedState = 'starting' | 'running' | 'ended';

/** The call once it runs detached or has ended (it failed to start, or ended at once), or as it is after `START_WAIT_MS`. */
export function waitUntilRunning(calls: Pick<CallService, 'waitFinished'>, leaseId: string, callId: string): Promise<CallView> {
  return calls.waitFinished(leaseId, callId, START_WAIT_MS);
}

/** The state of a resource held by `call`, and the pid its detached handle reported (null before it ran). */
export function detachedStateOf(call: CallView): { state: DetachedState; pid: number | null } {
  const pid = call.detached?.data?.pid;
  return {
    state: call.status === 'finished' ? 'ended' : call.status === 'detached' ? 'running' : 'starting',
    pid: typeof pid === 'number' ? pid : null,
  };
}
