import { describe, expect, it } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { exitStatusOf, exitStatusOfErrorCode } from './exit-status.js';

const result = (over: Partial<ToolResult>): ToolResult => ({
  callId: 'c',
  status: 'succeeded',
  error: null,
  modelText: '',
  exitCode: 0,
  signal: null,
  stdout: '',
  stderr: '',
  truncation: null,
  data: null,
  artifacts: [],
  receipt: null,
  ...over,
});

describe('sbx exit status', () => {
  it('is the command exit code, 124 on timeout, 130 on cancel, 126 when denied, 128+N on signal, 125 when sbx failed', () => {
    expect(exitStatusOf(result({ exitCode: 0 }))).toBe(0);
    expect(exitStatusOf(result({ status: 'failed', exitCode: 3 }))).toBe(3);
    expect(exitStatusOf(result({ status: 'timed_out', exitCode: null }))).toBe(124);
    expect(exitStatusOf(result({ status: 'cancelled', exitCode: null }))).toBe(130);
    expect(exitStatusOf(result({ status: 'denied', exitCode: null }))).toBe(126);
    expect(exitStatusOf(result({ status: 'failed', exitCode: null, signal: 'SIGKILL' }))).toBe(137);
    expect(exitStatusOf(result({ status: 'effect_unknown', exitCode: null }))).toBe(125);
    expect(exitStatusOf(result({ status: 'failed', exitCode: null }))).toBe(125);
    const notStarted = {
      receiptId: 'r',
      callId: 'c',
      attemptId: 'a',
      leaseId: 'l',
      tool: 'exec',
      toolVersion: '1',
      fingerprint: `sha256:${'0'.repeat(64)}`,
      commitState: 'not_started' as const,
      startedAt: '2026-01-01T00:00:00.000Z',
      endedAt: '2026-01-01T00:00:00.000Z',
      durationMs: 0,
      exit: null,
      environment: null,
      runner: null,
      outputs: null,
      cleanup: null,
      versions: [],
      artifacts: [],
      secretsUsed: [],
      manifestDigest: `sha256:${'0'.repeat(64)}`,
    };
    expect(exitStatusOf(result({ status: 'failed', exitCode: null, receipt: notStarted }))).toBe(126);
  });
});

describe('sbx exit status of a refused command', () => {
  it('is 126 when the program could not start (as an exec result says) or the policy denied the call, 125 for any other platform error', () => {
    expect(exitStatusOfErrorCode('input.cwd_not_found')).toBe(126);
    expect(exitStatusOfErrorCode('execution.spawn_failed')).toBe(126);
    expect(exitStatusOfErrorCode('policy.tool_denied')).toBe(126);
    expect(exitStatusOfErrorCode('policy.secret_denied')).toBe(126);
    expect(exitStatusOfErrorCode('auth.invalid_api_key')).toBe(125);
    expect(exitStatusOfErrorCode(undefined)).toBe(125);
  });
});
