/**
 * How `sbx run` and `sbx exec` turn a call's result into their own exit status: the command's
 * exit code when it exited; 124 on timeout (as timeout(1)); 130 when cancelled (as after
 * SIGINT); 128+N when killed by signal N (as POSIX shells); 126 when the command could not be
 * started or was denied (nothing ran) and 125 when sbx itself failed (as `docker run`).
 */
import { constants } from 'node:os';
import type { ToolResult } from '../contract/objects.js';

/** sbx itself failed. */
export const EXIT_PLATFORM_ERROR = 125;
export const EXIT_TIMED_OUT = 124;
/** The command could not be started in the sandbox (missing cwd, spawn failure) or was denied: nothing ran. */
export const EXIT_NOT_STARTED = 126;
export const EXIT_CANCELLED = 130;

/**
 * The exit status for an error code that stopped a command before it ran (`sbx shell --cwd
 * /missing` is refused at the terminal's create, where `sbx exec` gets a result; a policy's deny
 * rule refuses the call at submission, where an approver's denial is a result): 126 as for an
 * exec's, else 125.
 */
export function exitStatusOfErrorCode(code: string | undefined): number {
  return code !== undefined && NOT_STARTED_CODES.has(code) ? EXIT_NOT_STARTED : EXIT_PLATFORM_ERROR;
}

/** Refusals before anything ran: a missing cwd, a failed spawn, a call the policy denies at submission. */
const NOT_STARTED_CODES: ReadonlySet<string> = new Set([
  'input.cwd_not_found',
  'execution.spawn_failed',
  'policy.tool_denied',
  'policy.secret_denied',
]);

/** The exit status `sbx` reports for a finished call. */
export function exitStatusOf(result: ToolResult): number {
  switch (result.status) {
    case 'succeeded':
    case 'failed':
      if (result.exitCode !== null) return result.exitCode;
      if (result.receipt?.commitState === 'not_started') return EXIT_NOT_STARTED;
      if (result.signal) return 128 + (constants.signals[result.signal as keyof typeof constants.signals] ?? 0);
      return EXIT_PLATFORM_ERROR;
    case 'timed_out':
      return EXIT_TIMED_OUT;
    case 'cancelled':
      return EXIT_CANCELLED;
    case 'denied':
      // Refused by the policy or an approver: it could not be started, nothing ran.
      return EXIT_NOT_STARTED;
    default:
      return EXIT_PLATFORM_ERROR;
  }
}

/** `exitStatusOf(result)`, or 125 when the command succeeded but sbx could not deliver all it made (a failed download, a cut stream's rest). */
export function exitStatusDelivered(result: ToolResult, delivered: boolean): number {
  const status = exitStatusOf(result);
  return status === 0 && !delivered ? EXIT_PLATFORM_ERROR : status;
}
