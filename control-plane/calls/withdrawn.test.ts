import { describe, expect, it } from 'vitest';
import type { ErrorInfo } from '../../contract/errors.js';
import type { CallView } from '../../contract/objects.js';
import { denyWithdrawnSecrets, type WithdrawnSecretCalls } from './withdrawn.js';

const call = (callId: string, status: CallView['status'], secrets?: string[]): CallView => ({
  callId,
  leaseId: 'sbx_a',
  tool: 'exec',
  args: { cmd: 'true', ...(secrets ? { secrets } : {}) },
  fingerprint: `sha256:${'0'.repeat(64)}`,
  status,
  createdAt: '2026-12-04T00:00:00.000Z',
  detached: null,
  result: null,
});

function calls(views: CallView[], started: ReadonlySet<string>): WithdrawnSecretCalls & { denied: Array<[string, ErrorInfo]> } {
  const denied: Array<[string, ErrorInfo]> = [];
  return {
    denied,
    openCalls: async () => views.map((v) => v.callId),
    get: async (_lease, callId) => views.find((v) => v.callId === callId)!,
    denyUnstarted: async (_lease, callId, error) => {
      if (started.has(callId)) return false;
      denied.push([callId, error]);
      return true;
    },
  };
}

describe('calls that would get a withdrawn secret', () => {
  it('ends denied each queued call naming a secret no longer allowed, unless an agent took it first', async () => {
    const views = [
      call('keeps', 'queued', ['A']),
      call('loses', 'queued', ['A', 'B']),
      call('none', 'queued'),
      call('running', 'running', ['B']),
      call('waiting', 'pending_approval', ['B']),
      call('raced', 'queued', ['B']),
    ];
    const port = calls(views, new Set(['raced']));
    expect(await denyWithdrawnSecrets(port, 'sbx_a', ['A'])).toEqual(['loses']);
    expect(port.denied.map(([id, e]) => [id, e.code, e.details])).toEqual([
      ['loses', 'policy.secret_denied', { tool: 'exec', field: 'args.secrets', name: 'B', withdrawn: true }],
    ]);
  });
});
