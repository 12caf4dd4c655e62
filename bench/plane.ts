/**
 * The control plane under test, started as its own process (`node dist/control-plane/main.js`,
 * exactly what `npm start` runs) so that its CPU and memory are its own: the bench's client
 * and its dockerode baselines run in this process, not on the control plane's event loop.
 *
 * It gets an owner label and Redis key prefix of its own (so nothing else on the shared engine
 * and Redis is touched) and a temporary data directory (so the artifacts of 200 MB outputs go
 * away with it); it shares the machine's Redis server and Docker engine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../control-plane/config.js';
import { connectRedis, redisOptions } from '../control-plane/redis/connections.js';
import { dropPrefix } from '../control-plane/redis/drop-prefix.js';

export interface PlaneOptions {
  repoRoot: string;
  /** `SBX_WARM_POOLS` of the plane (JSON). */
  warmPools: unknown[];
  /** Settings on top of the bench's own (bench/kubernetes.ts: the Kubernetes driver's). */
  env?: Record<string, string>;
  /** Directory for a `--cpu-prof` profile of the plane, written when it stops. */
  cpuProfDir?: string | undefined;
}

export interface RunningPlane {
  url: string;
  apiKey: string;
  /** The plane's settings as it reads them (owner, prefix, image, Redis). */
  config: Config;
  pid: number;
  /** SIGTERM, wait for exit (its profile is written then), remove the data directory and the plane's Redis keys. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Starts the plane and waits until `/healthz` answers 200 (throws after 60 s or when it exits). */
export async function startPlane(options: PlaneOptions): Promise<RunningPlane> {
  const tag = randomBytes(4).toString('hex');
  const shared = loadConfig(process.env, options.repoRoot);
  const dataDir = mkdtempSync(join(tmpdir(), 'sbx-bench-'));
  const port = await freePort();
  const apiKey = `bench-${randomBytes(16).toString('hex')}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    // SBX_BENCH_OWNER_PREFIX: the bench smoke test names its owners as every test owner of its run is named.
    SBX_OWNER: `${process.env.SBX_BENCH_OWNER_PREFIX ?? 'bench-'}${tag}`,
    // SBX_BENCH_REDIS_PREFIX: the smoke test's keys start as every key of its test run does (test/leftovers.sh checks them).
    SBX_REDIS_PREFIX: `${process.env.SBX_BENCH_REDIS_PREFIX ?? 'sbxbench:'}${tag}:`,
    SBX_DATA_DIR: dataDir,
    SBX_REDIS_URL: shared.redis.path ? `unix://${shared.redis.path}` : shared.redis.url!,
    SBX_AGENT_REDIS_SOCKET: shared.agentRedisSocket,
    SBX_API_KEY: apiKey,
    SBX_SECRETS_KEY: randomBytes(32).toString('base64'),
    SBX_PORT: String(port),
    SBX_HOST: '127.0.0.1',
    SBX_IMAGE: shared.image,
    SBX_LOG_LEVEL: 'warn',
    SBX_WARM_POOLS: JSON.stringify(options.warmPools),
    ...options.env,
  };
  if (shared.redis.password !== undefined) env.SBX_REDIS_PASSWORD = shared.redis.password;
  const config = loadConfig(env, options.repoRoot);
  const args: string[] = [];
  if (options.cpuProfDir) {
    mkdirSync(options.cpuProfDir, { recursive: true });
    args.push('--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`, '--cpu-prof-name=control-plane.cpuprofile');
  }
  const child: ChildProcess = spawn(process.execPath, [...args, join(options.repoRoot, 'dist', 'control-plane', 'main.js')], {
    env,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let gone = false;
  void exited.then(() => (gone = true));
  const url = `http://127.0.0.1:${port}`;
  // What the plane leaves: its data directory and its Redis keys (its ledger outlives a lease for
  // the retention, 7 days by default: the keys of every bench run added up in the machine's Redis,
  // and each of its snapshots forked and wrote them all, a core for a second in the middle of a figure).
  const removeState = async (): Promise<void> => {
    rmSync(dataDir, { recursive: true, force: true });
    const redis = connectRedis(redisOptions(config.redis));
    await dropPrefix(redis, config.redisPrefix).finally(() => redis.disconnect());
  };
  const stop = async (): Promise<void> => {
    if (!gone) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    await removeState();
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (gone) {
      await removeState();
      throw new Error('the control plane exited during start (its stderr is above)');
    }
    const ok = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error('the control plane did not answer /healthz within 60 s');
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, apiKey, config, pid: child.pid!, stop };
}
