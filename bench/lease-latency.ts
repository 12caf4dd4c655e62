/**
 * `npm run bench:leases`: lease latency (request → ready for the first call), cold and warm, as
 * p50/p95/max over `SBX_BENCH_LEASES` leases each (default 50), against a control plane this
 * script starts. Cold leases use `default`; warm ones use `bench-warm`, a copy of `default`
 * under another name with a warm pool, and wait until the pool has a ready sandbox, so every
 * warm figure is a claim, not a cold start in disguise.
 */
import { randomBytes } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { SbxClient } from '../sdk/index.js';
import { loadConfig } from '../control-plane/config.js';
import { createControlPlane } from '../control-plane/control-plane.js';
import { connectRedis, redisOptions } from '../control-plane/queue/redis.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const COUNT = Number(process.env.SBX_BENCH_LEASES ?? 50);

/** p50, p95 and max of `samples` (ms), nearest-rank. */
export function percentiles(samples: readonly number[]): { count: number; p50: number; p95: number; max: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = (p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
  return { count: sorted.length, p50: rank(50), p95: rank(95), max: sorted.at(-1)! };
}

async function main(): Promise<void> {
  const tag = randomBytes(4).toString('hex');
  const env = {
    ...process.env,
    SBX_OWNER: `bench-${tag}`,
    SBX_REDIS_PREFIX: `sbxbench:${tag}:`,
    SBX_SECRETS_KEY: randomBytes(32).toString('base64'),
    SBX_WARM_POOLS: JSON.stringify([{ policy: 'bench-warm', min: 2, max: 2 }]),
  };
  const config = loadConfig(env, repoRoot);
  const apiKey = randomBytes(16).toString('hex');
  const plane = await createControlPlane(config, apiKey, pino({ level: 'warn' }));
  await plane.startBackground({ poolIntervalMs: 200 });
  await plane.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = plane.app.server.address() as { port: number };
  const client = new SbxClient(`http://127.0.0.1:${port}`, apiKey);
  const redis = connectRedis(redisOptions(config.redis));
  const readyKey = `${config.redisPrefix}pool:bench-warm@${config.image}:ready`;
  const defaults = (await (await fetch(`http://127.0.0.1:${port}/v1/policies/default`, { headers: { authorization: `Bearer ${apiKey}` } })).json()) as { policy: Record<string, unknown> };
  const put = await fetch(`http://127.0.0.1:${port}/v1/policies/bench-warm`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...defaults.policy, name: 'bench-warm', version: 1 }),
  });
  if (!put.ok) throw new Error(`could not create the bench-warm policy: ${await put.text()}`);
  const cold: number[] = [];
  const warm: number[] = [];
  try {
    for (let i = 0; i < COUNT; i += 1) {
      // Cold: the default policy has no pool.
      let start = performance.now();
      const c = await client.createSandbox();
      cold.push(performance.now() - start);
      // Warm: wait for a ready pooled sandbox first, so the create is a claim.
      while ((await redis.llen(readyKey)) === 0) await new Promise((r) => setTimeout(r, 50));
      start = performance.now();
      const w = await client.createSandbox({ policy: 'bench-warm' });
      warm.push(performance.now() - start);
      await Promise.all([client.releaseSandbox(c.id), client.releaseSandbox(w.id)]);
    }
    const show = (name: string, s: number[]): string => {
      const p = percentiles(s);
      return `${name.padEnd(5)} n=${p.count} p50=${p.p50.toFixed(1)} ms p95=${p.p95.toFixed(1)} ms max=${p.max.toFixed(1)} ms`;
    };
    process.stdout.write(`${show('cold', cold)}\n${show('warm', warm)}\n`);
  } finally {
    redis.disconnect();
    await plane.close();
    const { execFile } = await import('node:child_process');
    const ids = await new Promise<string>((res) => execFile('docker', ['ps', '-aq', '--filter', `label=sbx.owner=${config.owner}`], (_e, out) => res(out)));
    if (ids.trim()) await new Promise((res) => execFile('docker', ['rm', '-f', ...ids.trim().split('\n')], res));
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
