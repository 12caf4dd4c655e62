import { describe, expect, it } from 'vitest';
import { errorInfo } from '../../contract/errors.js';
import type { CallView, ToolResult } from '../../contract/objects.js';
import { resultWithoutRun } from '../../contract/receipts.js';
import type { AuditInput } from '../audit/schema.js';
import type { CallLease } from '../calls/service.js';
import { ProcessService } from './service.js';

const lease = { id: 'sbx_test' } as CallLease;
const by = { keyId: 'key_1', role: 'user' as const, tenant: 't1' };
const receipt = { receiptId: 'rcpt_1' } as ToolResult['receipt'];

/** A ProcessService over fakes: the call ends with `result` (or stays running when null). */
function service(result: ToolResult | null) {
  const submitted: Array<{ tool: string; args: unknown }> = [];
  const audited: AuditInput[] = [];
  const view = (callId: string): CallView =>
    ({ callId, status: result ? 'finished' : 'running', result: result ? { ...result, callId } : null }) as unknown as CallView;
  const s = new ProcessService({
    calls: {
      submit: async (_lease, body) => {
        submitted.push({ tool: body.tool, args: body.args });
        return { call: view('call_1'), created: true };
      },
      waitFinished: async (_id, callId) => view(callId),
    },
    audit: { record: async (entry) => (audited.push(entry), { ...entry, id: '1-0', at: '' }) as never },
  });
  return { s, submitted, audited };
}

const proc = {
  pid: 7,
  ppid: 1,
  user: 'sandbox',
  uid: 1000,
  command: 'sleep 9',
  sid: 7,
  state: 'S',
  owner: null,
  cpuTimeMs: 0,
  rssBytes: 4096,
  killable: true,
};

describe('ProcessService', () => {
  it('lists by a list_processes call and answers its processes with the call and receipt', async () => {
    const { s, submitted } = service({ ...resultWithoutRun('x', 'succeeded', null, { data: { processes: [proc] } }), receipt });
    expect(await s.list(lease)).toEqual({ processes: [proc], callId: 'call_1', receiptId: 'rcpt_1' });
    expect(submitted).toEqual([{ tool: 'list_processes', args: {} }]);
  });

  it('a refused signal is the tool error as an AppError (403) with the call, and is audited with its sender all the same', async () => {
    const error = errorInfo('process.not_killable', 'init');
    const { s, audited } = service({ ...resultWithoutRun('x', 'failed', error), receipt });
    await expect(s.signal(lease, 1, 'SIGKILL', by)).rejects.toMatchObject({
      code: 'process.not_killable',
      status: 403,
      details: { callId: 'call_1', receiptId: 'rcpt_1' },
    });
    expect(audited).toEqual([
      expect.objectContaining({
        actor: { keyId: 'key_1', role: 'user', tenant: 't1' },
        action: 'process.signal',
        target: 'process:sbx_test.1',
        details: expect.objectContaining({ signal: 'SIGKILL', status: 'failed', code: 'process.not_killable' }),
      }),
    ]);
  });

  it('a call the agent has not answered within the wait is handed back to follow', async () => {
    const { s } = service(null);
    expect(await s.signal(lease, 7, 'SIGTERM', by)).toEqual({ callId: 'call_1', status: 'running' });
  });
});
