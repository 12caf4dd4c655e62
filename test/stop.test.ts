/**
 * `npm run stop` / `sbx down` (issue 11, defect 9): for a data directory of the test's own,
 * deploy/local/redis.sh starts set-up's Redis and a control plane (`main.js`) runs on it; the
 * stop ends exactly those two, by pid, and leaves dockerd and the sandbox running (the next
 * start adopts it). A second stop is a no-op. Pidfiles naming something else are not followed.
 * And a SIGTERM stops that Redis also when its data directory was removed under it.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ToolResult } from '../contract/objects.js';
import { controlPlanePidfile, formatPidfile, processIdentity } from '../contract/data-dir.js';
import { planeIdentity, startChildPlane, type ChildPlane, REPO_ROOT, docker, startHarness, type Harness } from './fixtures/index.js';

const run = promisify(execFile);

/** What each test started, stopped in afterEach whatever happened (only these pids, by pid). */
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
});

/** A data dir of the test's own with set-up's Redis running in it; its pid. */
async function dataDirWithRedis(): Promise<{ dataDir: string; redisPid: number }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-stop-'));
  cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
  await run('bash', [join(REPO_ROOT, 'deploy/local/redis.sh')], { env: { ...process.env, SBX_DATA_DIR: dataDir } });
  const redisPid = Number((await readFile(join(dataDir, 'redis', 'redis.pid'), 'utf8')).trim());
  cleanup.push(async () => killAndWait(redisPid));
  return { dataDir, redisPid };
}

/** SIGKILL to `pid` if it is still running (a test that failed), then waits until it is gone. */
async function killAndWait(pid: number): Promise<void> {
  if (!processIdentity(pid)) return;
  process.kill(pid, 'SIGKILL');
  await vi.waitFor(() => expect(processIdentity(pid)).toBeNull(), { timeout: 10_000, interval: 50 });
}

/** `sbx down` (or `npm run stop`) for `dataDir`: exit code and stdout. */
async function stop(dataDir: string, how: 'npm' | 'sbx', ...args: string[]): Promise<{ code: number; stdout: string }> {
  const [cmd, argv] =
    how === 'npm'
      ? ['npm', ['run', '--silent', 'stop', '--', ...args]]
      : [process.execPath, [join(REPO_ROOT, 'dist/cli/sbx.js'), 'down', ...args]];
  try {
    const { stdout } = await run(cmd as string, argv as string[], { cwd: REPO_ROOT, env: { ...process.env, SBX_DATA_DIR: dataDir } });
    return { code: 0, stdout };
  } catch (err) {
    const e = err as { code?: number; stdout?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '' };
  }
}

const dockerdPid = async (): Promise<string> =>
  (
    await run('pidof', ['dockerd']).then(
      (r) => r.stdout,
      () => '',
    )
  ).trim();

describe('npm run stop / sbx down', () => {
  it('stops the control plane and the Redis of one data dir, leaves dockerd and the sandbox running; a second stop is a no-op', async () => {
    const { dataDir, redisPid } = await dataDirWithRedis();
    const identity = planeIdentity('stop');
    cleanup.push(async () => {
      const ids = (await docker('ps', '-aq', '--filter', `label=sbx.owner=${identity.owner}`)).split('\n').filter(Boolean);
      if (ids.length > 0) await docker('rm', '-f', '-v', ...ids);
      const volumes = (await docker('volume', 'ls', '-q', '--filter', `label=sbx.owner=${identity.owner}`)).split('\n').filter(Boolean);
      if (volumes.length > 0) await docker('volume', 'rm', ...volumes);
    });
    const plane: ChildPlane = await startChildPlane(identity, { SBX_DATA_DIR: dataDir });
    cleanup.push(() => plane.kill9());
    const lease = await plane.client.createSandbox();
    expect(await readdir(join(dataDir, 'run'))).toEqual([`control-plane.${plane.child.pid}.pid`]);
    const dockerd = await dockerdPid();

    const first = await stop(dataDir, 'npm');
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(`stopped control plane pid ${plane.child.pid} (`);
    expect(first.stdout).toContain(
      `stopped redis-server pid ${redisPid} (redis-server unixsocket:${join(dataDir, 'redis-socket', 'redis.sock')})`,
    );
    expect(first.stdout).toMatch(/left running: dockerd .* and the sandboxes/);
    // It shut down as on SIGTERM (exit 0, its pidfile removed), and Redis is gone.
    expect(await plane.exited).toBe(0);
    expect(await readdir(join(dataDir, 'run'))).toEqual([]);
    expect(processIdentity(redisPid)).toBeNull();
    expect(await dockerdPid()).toBe(dockerd);
    expect((await docker('inspect', '-f', '{{.State.Running}}', `sbx-${lease.id}`)).trim()).toBe('true');

    const second = await stop(dataDir, 'sbx', '--json');
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout)).toEqual({ dataDir, entries: [], errors: [] });
    expect((await stop(dataDir, 'sbx')).stdout).toContain(`nothing of ${dataDir} was running`);

    // The next start (set-up's Redis again, then a control plane) adopts the sandbox.
    await run('bash', [join(REPO_ROOT, 'deploy/local/redis.sh')], { env: { ...process.env, SBX_DATA_DIR: dataDir } });
    const restartedRedis = Number((await readFile(join(dataDir, 'redis', 'redis.pid'), 'utf8')).trim());
    cleanup.push(async () => killAndWait(restartedRedis));
    const h: Harness = await startHarness({
      SBX_OWNER: identity.owner,
      SBX_REDIS_PREFIX: identity.prefix,
      SBX_SECRETS_KEY: identity.secretsKey,
      SBX_DATA_DIR: dataDir,
    });
    cleanup.push(() => h.close());
    const result = (await h.client.submitCall(lease.id, 'exec', { argv: ['echo', 'adopted'] }, { waitSeconds: 60 })) as ToolResult;
    expect(result.stdout).toBe('adopted\n');
    expect((await h.client.releaseSandbox(lease.id)).status).toBe('released');
  }, 180_000);

  it('follows no pidfile to a process that is not what set-up or npm start made: the pidfile goes, the process stays', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'sbx-stop-'));
    cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
    const bystander = spawn('sleep', ['600'], { stdio: 'ignore' });
    cleanup.push(async () => bystander.kill('SIGKILL'));
    const pid = bystander.pid!;
    await vi.waitFor(() => expect(processIdentity(pid)).not.toBeNull(), { timeout: 5000, interval: 20 });
    // Both pidfiles name the bystander: the control plane's with its very start time, Redis's with its pid.
    await mkdir(join(dataDir, 'run'), { recursive: true });
    await writeFile(controlPlanePidfile(dataDir, pid), formatPidfile(processIdentity(pid)!));
    await writeFile(controlPlanePidfile(dataDir, 999_999_999), '999999999 1\n');
    await mkdir(join(dataDir, 'redis'), { recursive: true });
    await writeFile(join(dataDir, 'redis', 'redis.pid'), `${pid}\n`);

    const { code, stdout } = await stop(dataDir, 'sbx');
    expect(code).toBe(0);
    expect(stdout).toContain(`nothing of ${dataDir} was running`);
    expect(stdout).toContain(`pid ${pid} is not a control plane`);
    expect(stdout).toContain('pid 999999999 is not running');
    expect(stdout).toContain(`pid ${pid} is not the redis-server of this data directory`);
    expect(processIdentity(pid)).not.toBeNull();
    expect(bystander.exitCode).toBeNull();
    expect(await readdir(join(dataDir, 'run'))).toEqual([]);
  });

  it("a SIGTERM stops set-up's Redis also after its data directory was removed", async () => {
    const { dataDir, redisPid } = await dataDirWithRedis();
    await rm(dataDir, { recursive: true, force: true });
    process.kill(redisPid, 'SIGTERM');
    // Without `shutdown-on-sigterm force` it fails its final RDB save and refuses to exit.
    await vi.waitFor(() => expect(processIdentity(redisPid)).toBeNull(), { timeout: 10_000, interval: 50 });
  });
});
