import { describe, expect, it } from 'vitest';
import { exitVerdict, stoppedVerdict } from './attempt.js';

describe('verdicts of a program that ran', () => {
  it('stopped by its timeout or a cancel: what it did is unknown', () => {
    expect(stoppedVerdict('timeout', 'timed out after 5 ms', { timeoutMs: 5 })).toEqual({
      status: 'timed_out',
      commitState: 'unknown',
      error: {
        code: 'execution.timeout',
        domain: 'execution',
        message: 'timed out after 5 ms',
        retryability: 'reconcile_first',
        details: { timeoutMs: 5 },
      },
    });
    expect(stoppedVerdict('cancel', 'cancelled')).toMatchObject({
      status: 'cancelled',
      commitState: 'unknown',
      error: { code: 'execution.cancelled' },
    });
    expect(stoppedVerdict('cancel', 'cancelled').error).not.toHaveProperty('details');
  });

  it('ended by itself: 0 succeeded, another code failed and committed, a signal failed and unknown', () => {
    expect(exitVerdict({ code: 0, signal: null })).toEqual({ status: 'succeeded', commitState: 'committed', error: null });
    expect(exitVerdict({ code: 2, signal: null }, { note: '; the session has ended' })).toMatchObject({
      status: 'failed',
      commitState: 'committed',
      error: { code: 'execution.nonzero_exit', message: 'exited with code 2; the session has ended', details: { exitCode: 2 } },
    });
    expect(exitVerdict({ code: null, signal: 'SIGKILL' })).toMatchObject({
      status: 'failed',
      commitState: 'unknown',
      error: { code: 'execution.signaled', message: 'killed by SIGKILL', details: { signal: 'SIGKILL' } },
    });
    expect(exitVerdict({ code: null, signal: 'SIGHUP' }, { killed: "the session's shell" }).error?.message).toBe(
      "the session's shell was killed by SIGHUP",
    );
  });
});
