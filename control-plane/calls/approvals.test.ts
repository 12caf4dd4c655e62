/**
 * Tool approval rules: first match decides, by tool, effect class, argv pattern and path pattern.
 */
import { describe, expect, it } from 'vitest';
import { TOOLS } from './tools.js';
import { decideApproval, type Approvals } from './approvals.js';

const approvals: Approvals = {
  timeoutSeconds: 3600,
  rules: [
    { decision: 'deny', effects: ['fs.write'], paths: ['/workspace/.github/workflows/**'] },
    { decision: 'ask', tools: ['exec'], argv: ['git push *'] },
    { decision: 'allow', tools: ['exec'] },
    { decision: 'ask', effects: ['fs.write'] },
  ],
};
const call = (tool: string, args: Record<string, unknown>, paths: string[] = []) => ({
  spec: TOOLS.get(tool)!.spec,
  args,
  accesses: paths.map((path) => ({ kind: 'path' as const, path, mode: 'write' as const })),
});

describe('decideApproval', () => {
  it('the first rule that matches decides; none matching allows', () => {
    expect(decideApproval(approvals, call('exec', { argv: ['git', 'push', 'origin', 'main'] }))).toEqual({
      decision: 'ask',
      rule: 'tools.approvals.rules[1]',
    });
    expect(decideApproval(approvals, call('exec', { argv: ['git', 'status'] }))).toEqual({
      decision: 'allow',
      rule: 'tools.approvals.rules[2]',
    });
    expect(decideApproval(approvals, call('exec', { cmd: 'git push --force origin main' }))).toMatchObject({ decision: 'ask' });
    expect(
      decideApproval(
        approvals,
        call('write_file', { path: '/workspace/.github/workflows/ci.yml' }, ['/workspace/.github/workflows/ci.yml']),
      ),
    ).toEqual({
      decision: 'deny',
      rule: 'tools.approvals.rules[0]',
    });
    expect(decideApproval(approvals, call('write_file', { path: '/workspace/a.txt' }, ['/workspace/a.txt']))).toMatchObject({
      decision: 'ask',
      rule: 'tools.approvals.rules[3]',
    });
    expect(decideApproval(approvals, call('read_file', { path: '/workspace/a.txt' }))).toEqual({ decision: 'allow', rule: 'default' });
    expect(decideApproval(undefined, call('exec', { argv: ['git', 'push'] }))).toEqual({ decision: 'allow', rule: 'default' });
  });

  it('exec in tools stands for every tool that runs programs; moving or removing a parent of a denied path is denied (found by review)', () => {
    const ask = { timeoutSeconds: 60, rules: [{ decision: 'ask' as const, tools: ['exec'] }] };
    for (const tool of ['terminal', 'session_start', 'git_status', 'git_diff'])
      expect(decideApproval(ask, call(tool, {})).decision).toBe('ask');
    expect(decideApproval(ask, call('read_file', {})).decision).toBe('allow');
    expect(decideApproval(approvals, call('move', {}, ['/workspace/.github', '/workspace/gh'])).decision).toBe('deny');
    expect(decideApproval(approvals, call('remove', {}, ['/workspace/.github/workflows'])).decision).toBe('deny');
    expect(decideApproval(approvals, call('remove', {}, ['/workspace/.githubx'])).decision).toBe('ask');
  });

  it('argv patterns match the whole command line; * in paths stays within a segment, ** crosses them', () => {
    expect(decideApproval(approvals, call('exec', { argv: ['echo', 'git push x'] })).decision).toBe('allow');
    const one = { timeoutSeconds: 60, rules: [{ decision: 'deny' as const, paths: ['/workspace/*.lock'] }] };
    expect(decideApproval(one, call('write_file', {}, ['/workspace/a.lock'])).decision).toBe('deny');
    expect(decideApproval(one, call('write_file', {}, ['/workspace/sub/a.lock'])).decision).toBe('allow');
  });
});
