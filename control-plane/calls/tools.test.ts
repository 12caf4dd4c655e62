import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { AppError } from '../../contract/errors.js';
import type { SecretGrant } from '../../contract/queue.js';
import { Policy } from '../policies/schema.js';
import { describeTools, TOOLS } from './tools.js';

const base = Policy.parse(parseYaml(readFileSync(new URL('../../policies/default.yaml', import.meta.url), 'utf8')));
const resolve = (tool: string, args: unknown, policy = base, grants: SecretGrant[] = []) => TOOLS.get(tool)!.resolve(args, policy, grants);

describe('tool resolution', () => {
  it('declares accesses: reads and writes their (lexical) path, exec everything', () => {
    expect(resolve('read_file', { path: '/workspace/a/../b.txt' }).accesses).toEqual([
      { kind: 'path', path: '/workspace/b.txt', mode: 'read' },
    ]);
    expect(resolve('write_file', { path: '/workspace/b.txt', content: '' }).accesses).toEqual([
      { kind: 'path', path: '/workspace/b.txt', mode: 'write' },
    ]);
    expect(resolve('exec', { argv: ['true'] }).accesses).toEqual([{ kind: 'all' }]);
  });

  it('refuses a path outside the writable roots before anything is queued', () => {
    expect(() => resolve('read_file', { path: '/workspace/../etc/passwd' })).toThrow(AppError);
  });

  it('git tools count as running code: denied when the policy disables exec, like exec itself', () => {
    const noExec = { ...base, tools: { ...base.tools, exec: { ...base.tools.exec, enabled: false } } };
    for (const tool of ['exec', 'git_status', 'git_diff']) {
      expect(() => resolve(tool, tool === 'exec' ? { argv: ['true'] } : { path: '/workspace' }, noExec)).toThrow(
        expect.objectContaining({ code: 'policy.tool_denied' }),
      );
    }
    expect(resolve('read_file', { path: '/workspace/x' }, noExec).accesses).toHaveLength(1);
  });

  it('exec may ask only for secrets its lease was granted and its current policy allows (policy.secret_denied naming the secret)', () => {
    const grants: SecretGrant[] = [{ name: 'NPM_TOKEN', env: 'NPM_TOKEN', file: null }];
    const allowing = { ...base, secrets: { ...base.secrets, allowed: ['NPM_TOKEN'] } };
    expect(resolve('exec', { argv: ['true'], secrets: ['NPM_TOKEN'] }, allowing, grants).args.secrets).toEqual(['NPM_TOKEN']);
    // Granted, then withdrawn by the policy the sandbox runs now (a phase, a later version).
    expect(() => resolve('exec', { argv: ['true'], secrets: ['NPM_TOKEN'] }, base, grants)).toThrow(
      expect.objectContaining({ code: 'policy.secret_denied', details: expect.objectContaining({ name: 'NPM_TOKEN', withdrawn: true }) }),
    );
    expect(() => resolve('exec', { argv: ['true'], secrets: ['NPM_TOKEN', 'GH_TOKEN'] }, base, grants)).toThrow(
      expect.objectContaining({ code: 'policy.secret_denied', details: expect.objectContaining({ name: 'GH_TOKEN' }) }),
    );
    expect(() => resolve('exec', { argv: ['true'], secrets: ['NPM_TOKEN'] })).toThrow(
      expect.objectContaining({ code: 'policy.secret_denied' }),
    );
  });

  it('file operations declare their paths (move: both ends, normalized and each inside the roots); process tools touch nothing', () => {
    expect(resolve('move', { path: '/workspace/a/../a.txt', destination: '/tmp/./b.txt' }).accesses).toEqual([
      { kind: 'path', path: '/workspace/a.txt', mode: 'write' },
      { kind: 'path', path: '/tmp/b.txt', mode: 'write' },
    ]);
    expect(() => resolve('move', { path: '/workspace/a.txt', destination: '/etc/b' })).toThrow(
      expect.objectContaining({ code: 'input.path_outside_workspace', details: expect.objectContaining({ field: 'args.destination' }) }),
    );
    expect(resolve('remove', { path: '/workspace/x/' }).accesses).toEqual([{ kind: 'path', path: '/workspace/x', mode: 'write' }]);
    expect(resolve('stat', { path: '/workspace/x' }).accesses).toEqual([{ kind: 'path', path: '/workspace/x', mode: 'read' }]);
    expect(resolve('make_dir', { path: '/workspace/x' }).accesses).toEqual([{ kind: 'path', path: '/workspace/x', mode: 'write' }]);
    expect(resolve('list_processes', {}).accesses).toEqual([]);
    expect(resolve('signal_process', { pid: 12, signal: 'SIGINT' }).accesses).toEqual([]);
    expect(() => resolve('signal_process', { pid: 12, signal: 'SIGFOO' })).toThrow();
    const noExec = { ...base, tools: { ...base.tools, exec: { ...base.tools.exec, enabled: false } } };
    expect(() => resolve('list_processes', {}, noExec)).toThrow(expect.objectContaining({ code: 'policy.tool_denied' }));
  });

  it('an internal tool (a session shell, a terminal) resolves like any other but is not listed for clients', () => {
    expect(TOOLS.get('terminal')!.spec.internal?.startedBy).toBe('POST /v1/sandboxes/:id/terminals');
    expect(TOOLS.get('session_start')!.spec.internal?.startedBy).toBe('POST /v1/sandboxes/:id/sessions');
    const listed = describeTools().map((t) => t.name);
    expect(listed).not.toContain('terminal');
    expect(listed).not.toContain('session_start');
    expect(listed).toEqual([...TOOLS.values()].filter((t) => !t.spec.internal).map((t) => t.name));
    expect(resolve('terminal', { cols: 80, rows: 24 })).toMatchObject({
      accesses: [{ kind: 'all' }],
      timeoutMs: base.terminals.maxDurationSeconds * 1000,
      args: { idleTimeoutMs: base.terminals.idleTimeoutSeconds * 1000 },
    });
  });
});
