/**
 * Integration-test harness: a real control plane (the same assembly as `npm start`) on a random
 * loopback port, against the real Docker engine and Redis that deploy/local/setup.sh started.
 * Each harness gets its own owner label and Redis key prefix, so tests cannot see each other's
 * sandboxes, and `close()` releases whatever a test left behind.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import pino, { type DestinationStream } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { SbxClient } from '../sdk/index.js';
import { loadConfig, type Config } from '../control-plane/config.js';
import { createControlPlane, type ControlPlane } from '../control-plane/control-plane.js';
import { BOOTSTRAP_PRINCIPAL } from '../control-plane/http/auth.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';

export const REPO_ROOT = resolve(import.meta.dirname, '..');
const run = promisify(execFile);

export interface Harness {
  config: Config;
  plane: ControlPlane;
  client: SbxClient;
  url: string;
  apiKey: string;
  /** A plain Redis connection on the same server (for checks on raw keys). */
  redis: Redis;
  /** Starts another control plane with the same owner and prefix (a second process or a restart). */
  startPeer(): Promise<{ plane: ControlPlane; client: SbxClient; close(): Promise<void> }>;
  close(): Promise<void>;
}

/**
 * Starts a harness; `overrides` are `SBX_*` settings. `logStream` receives the control planes'
 * log lines (JSON, one a line) instead of stdout, for tests that check what is logged.
 */
export async function startHarness(overrides: Record<string, string> = {}, options: { logStream?: DestinationStream } = {}): Promise<Harness> {
  const tag = randomBytes(4).toString('hex');
  const env = {
    ...process.env,
    SBX_OWNER: `test-${tag}`,
    SBX_REDIS_PREFIX: `sbxtest:${tag}:`,
    SBX_LOG_LEVEL: 'warn',
    SBX_PORT: '0',
    // Each harness encrypts its secrets under a key of its own.
    SBX_SECRETS_KEY: randomBytes(32).toString('base64'),
    ...overrides,
  };
  const config = loadConfig(env, REPO_ROOT);
  const apiKey = `test-key-${randomBytes(16).toString('hex')}`;
  const log = options.logStream ? pino({ level: config.logLevel }, options.logStream) : pino({ level: config.logLevel });
  const started: Array<{ plane: ControlPlane; client: SbxClient }> = [];
  const start = async (): Promise<{ plane: ControlPlane; client: SbxClient; close(): Promise<void> }> => {
    const plane = await createControlPlane(config, apiKey, log);
    await plane.startBackground({ reconcileIntervalMs: 500 });
    await plane.app.listen({ port: 0, host: '127.0.0.1' });
    const address = plane.app.server.address();
    if (!address || typeof address === 'string') throw new Error('no port');
    const client = new SbxClient(`http://127.0.0.1:${address.port}`, apiKey);
    const entry = { plane, client, close: () => plane.close() };
    started.push(entry);
    return entry;
  };
  const first = await start();
  const redis = connectRedis(redisOptions(config.redis));
  // A test may restart Redis under it; reconnecting is ioredis's job, the noise is not wanted.
  redis.on('error', () => undefined);
  const harness: Harness = {
    config,
    plane: first.plane,
    client: first.client,
    url: first.client.baseUrl,
    apiKey,
    redis,
    startPeer: start,
    async close() {
      // Tests may swap in a peer (after closing the first plane): release through the current one.
      for (const lease of await harness.plane.leases.list(BOOTSTRAP_PRINCIPAL)) {
        if (lease.status === 'ready') await harness.plane.leases.release(lease.id, BOOTSTRAP_PRINCIPAL).catch(() => undefined);
      }
      await removeContainersOf(config.owner);
      await Promise.allSettled(started.map((s) => s.plane.close()));
      redis.disconnect();
    },
  };
  return harness;
}

/** Containers carrying `sbx.owner=<owner>` (names), as `docker ps -a` lists them. */
export async function containersOf(owner: string): Promise<string[]> {
  const { stdout } = await run('docker', ['ps', '-a', '--filter', `label=sbx.owner=${owner}`, '--format', '{{.Names}}']);
  return stdout.split('\n').filter(Boolean);
}

async function removeContainersOf(owner: string): Promise<void> {
  const names = await containersOf(owner);
  if (names.length > 0) await run('docker', ['rm', '-f', '-v', ...names]);
}

/** `docker` with arguments; stdout. */
export async function docker(...args: string[]): Promise<string> {
  return (await run('docker', args)).stdout;
}

/** The routes an app has, from fastify's route tree: `METHOD /path` (HEAD left out). */
export function routesOf(app: FastifyInstance): Array<{ method: string; path: string }> {
  const routes: Array<{ method: string; path: string }> = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^((?:│ {3}| {4})*)[├└]── (\S+) \(([^)]+)\)$/.exec(line.trimEnd());
    if (!match) continue;
    const depth = match[1]!.length / 4;
    stack.length = depth;
    stack.push(match[2]!);
    for (const method of match[3]!.split(', ')) if (method !== 'HEAD') routes.push({ method, path: stack.join('') });
  }
  return routes;
}

/** Concatenates a finished call's output events of one stream, checking offsets are contiguous. */
export function reassemble(events: Array<{ type: string; stream?: string; offset?: number; dataBase64?: string }>, stream: 'stdout' | 'stderr'): Buffer {
  const parts: Buffer[] = [];
  let next = 0;
  for (const e of events) {
    if (e.type !== 'output' || e.stream !== stream) continue;
    if (e.offset !== next) throw new Error(`${stream} offset ${e.offset} where ${next} was expected`);
    const data = Buffer.from(e.dataBase64!, 'base64');
    parts.push(data);
    next += data.length;
  }
  return Buffer.concat(parts);
}

/**
 * For a test file that works in one sandbox: registers `beforeAll` (start a harness, lease a
 * sandbox under the default policy, hand both to `bind`) and `afterAll` (close the harness,
 * which releases what is left).
 */
export function useLeasedSandbox(bind: (h: Harness, leaseId: string) => void): void {
  let h: Harness | undefined;
  beforeAll(async () => {
    h = await startHarness();
    bind(h, (await h.client.createSandbox()).id);
  });
  afterAll(async () => h?.close());
}

/**
 * Reads `read()` every `intervalMs` until `done(value)` holds, and returns that value; throws
 * with the last value seen after `timeoutMs`.
 */
export async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms; last: ${JSON.stringify(value)?.slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
