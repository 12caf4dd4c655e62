/**
 * The start of an attempt in one Redis round trip: the redelivery check (an earlier attempt's
 * durable marker), the take-back check (the call's `queued` marker), the durable cancel marker,
 * the lease's withdrawn secrets, and the claim of the marker, in that order, as one Lua script:
 * the control plane's take-back (agent-link/calls-out.ts) and this claim exclude each other, and
 * a secret withdrawn before the claim is never handed to the call.
 */
import type { LeaseKeys } from '../../contract/queue.js';

/**
 * How an attempt may begin: `claimed` (this attempt holds the marker and runs), `attempted`
 * (an earlier attempt began: the call is `effect_unknown`, never re-run), `removed` (the
 * control plane took the call back and answered it: nothing runs and nothing is reported),
 * `cancelled` (a cancel came before the start: nothing runs), `withdrawn:<name>` (a secret the
 * call names was withdrawn from the lease by a phase move or policy change: nothing runs).
 */
export type AttemptStart = 'claimed' | 'attempted' | 'removed' | 'cancelled' | `withdrawn:${string}`;

/** Claims the attempt marker of `callId` for `attemptId` unless it is taken, the call was cancelled or one of its `secrets` withdrawn. */
export type BeginAttempt = (callId: string, attemptId: string, secrets?: readonly string[]) => Promise<AttemptStart>;

/**
 * KEYS[1] the attempt marker, KEYS[2] the queued marker, KEYS[3] the cancel marker, KEYS[4] the
 * lease's withdrawn secrets (a set); ARGV[1] the attempt id, ARGV[2..] the secrets the call names.
 */
const BEGIN_ATTEMPT = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 'attempted' end
if redis.call('GET', KEYS[2]) == 'removed' then return 'removed' end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'cancelled' end
for i = 2, #ARGV do
  if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 1 then return 'withdrawn:' .. ARGV[i] end
end
redis.call('SET', KEYS[1], ARGV[1])
return 'claimed'`;

/** EVAL of the Redis connection the agent holds (ioredis stays in main.ts). */
export type EvalScript = (script: string, numKeys: number, ...args: string[]) => Promise<unknown>;

/** `BeginAttempt` over the lease's keys, one EVAL per attempt. */
export function redisBeginAttempt(
  evalScript: EvalScript,
  keys: Pick<LeaseKeys, 'attempt' | 'queued' | 'cancel' | 'withdrawn'>,
): BeginAttempt {
  return async (callId, attemptId, secrets = []) =>
    (await evalScript(
      BEGIN_ATTEMPT,
      4,
      keys.attempt(callId),
      keys.queued(callId),
      keys.cancel(callId),
      keys.withdrawn,
      attemptId,
      ...secrets,
    )) as AttemptStart;
}
