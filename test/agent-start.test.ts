/**
 * The agent's start in a real sandbox: it runs as AGENT_COMMAND says (the runtime's node with
 * the agent's flags), and V8 took the code cache the runtime's build wrote (`agent ready` logs
 * `codeCache: "accepted"`); a cache V8 rejects, e.g. one written under other node flags, makes
 * every agent compile its whole bundle at each start.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { AGENT_COMMAND } from '../contract/agent-runtime.js';
import { useLeasedSandbox } from './fixtures/index.js';

let leaseId: string;

const { exec } = useLeasedSandbox((_harness, id) => {
  leaseId = id;
});

describe('agent start', () => {
  it('runs the agent as AGENT_COMMAND and loads its bundle from the accepted code cache', async () => {
    const ps = await exec({ cmd: `pgrep -f '^${AGENT_COMMAND.join(' ')}$'` });
    expect(ps.status, ps.stderr).toBe('succeeded');
    // The agent logs to stderr, which `docker logs` passes on as its own.
    const logs = spawnSync('docker', ['logs', `sbx-${leaseId}`], { encoding: 'utf8' });
    const ready = `${logs.stdout}\n${logs.stderr}`
      .split('\n')
      .filter((line) => line.includes('"agent ready"'))
      .map((line) => JSON.parse(line.slice(line.indexOf('{'))) as { codeCache?: string });
    expect(ready).toHaveLength(1);
    expect(ready[0]!.codeCache).toBe('accepted');
  });
});
