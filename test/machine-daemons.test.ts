/**
 * The Docker engine and the Redis that set-up (deploy/local/setup.sh) starts serve the machine, not
 * one test run: they carry no run id in their environment, so `test/leftovers.sh --remove` (the
 * suite's teardown) cannot take them for a process the run started and SIGKILL them. On a fresh
 * machine `npm test` itself starts them, under the caller's `SBX_TEST_RUN` (CI sets one).
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { dataDirLayout } from '../contract/data-dir.js';
import { loadConfig } from '../control-plane/config.js';
import { RUN_ENV, testRunId } from './fixtures/run.js';

const run = promisify(execFile);
const REPO_ROOT = join(import.meta.dirname, '..');

/** The `SBX_TEST_RUN` value in a process's environment (proc(5) environ), or null. */
async function runIdOf(pid: number): Promise<string | null> {
  const environ = await readFile(`/proc/${pid}/environ`, 'latin1');
  const entry = environ.split('\0').find((pair) => pair.startsWith(`${RUN_ENV}=`));
  return entry ? entry.slice(RUN_ENV.length + 1) : null;
}

describe('machine daemons', () => {
  it("the engine, its containerd and set-up's Redis carry no test run id, so no run's teardown reaps them", async () => {
    const { stdout } = await run('pidof', ['dockerd', 'containerd']);
    const enginePids = stdout.trim().split(/\s+/).map(Number);
    const { dataDir } = loadConfig(process.env, REPO_ROOT);
    const redisPid = Number((await readFile(dataDirLayout(dataDir).redisPidfile, 'utf8')).trim());
    const daemons = [...enginePids, redisPid];
    expect(daemons.length).toBeGreaterThanOrEqual(3);
    const carried = await Promise.all(daemons.map(async (pid) => ({ pid, runId: await runIdOf(pid) })));
    expect(carried.filter(({ runId }) => runId === testRunId())).toEqual([]);
  });
});
