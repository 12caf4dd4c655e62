/**
 * `npm run bench`: how much sbx adds on top of the Docker engine, as ratios against a baseline
 * measured in the same run on the same machine (absolute times vary between machines; ratios
 * much less). Each figure is the median of N runs (`SBX_BENCH_RUNS`, default 10).
 *
 * - lease: POST /v1/sandboxes until `ready` (agent connected, manifest built) vs `docker run`
 *   of the same image with `--network none` running `true`.
 * - echo round trip: exec `echo` through API → queue → agent → queue → ledger → API (`?wait=`)
 *   vs `docker exec <same container> echo`.
 * - 1 MB output: exec printing 1 000 000 bytes, result complete, vs `docker exec` of the same.
 * - read_file of a 1 MiB text file (content, sha256, line counts) vs `docker exec cat`.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pino from 'pino';
import { SbxClient } from '../sdk/index.js';
import { loadConfig } from '../control-plane/config.js';
import { createControlPlane } from '../control-plane/control-plane.js';
import { BOOTSTRAP_PRINCIPAL } from '../control-plane/http/auth.js';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const RUNS = Number(process.env.SBX_BENCH_RUNS ?? 10);

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

async function medianOf(fn: () => Promise<unknown>): Promise<number> {
  await fn(); // warm-up, not counted
  const samples: number[] = [];
  for (let i = 0; i < RUNS; i += 1) samples.push(await timed(fn));
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

async function main(): Promise<void> {
  const tag = randomBytes(4).toString('hex');
  const config = loadConfig({ ...process.env, SBX_OWNER: `bench-${tag}`, SBX_REDIS_PREFIX: `sbxbench:${tag}:`, SBX_SECRETS_KEY: randomBytes(32).toString('base64') }, repoRoot);
  const apiKey = randomBytes(16).toString('hex');
  const plane = await createControlPlane(config, apiKey, pino({ level: 'warn' }));
  await plane.startBackground();
  await plane.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = plane.app.server.address() as { port: number };
  const client = new SbxClient(`http://127.0.0.1:${port}`, apiKey);
  const leases: string[] = [];
  try {
    const leaseMs = await medianOf(async () => leases.push((await client.createSandbox()).id));
    const dockerRunMs = await medianOf(() => run('docker', ['run', '--rm', '--network', 'none', '--entrypoint', 'true', config.image]));

    const id = leases[0]!;
    const container = `sbx-${id}`;
    const echoMs = await medianOf(() => client.submitCall(id, 'exec', { argv: ['echo', 'hi'] }, { waitSeconds: 30 }));
    const dockerExecMs = await medianOf(() => run('docker', ['exec', '--user', '1000', container, 'echo', 'hi']));

    const mbCmd = "head -c 1000000 /dev/zero | tr '\\0' x";
    const mbMs = await medianOf(async () => {
      const r = await client.submitCall(id, 'exec', { cmd: mbCmd }, { waitSeconds: 60 });
      if (!('stdout' in r) || r.stdout.length !== 1_000_000) throw new Error('1 MB output incomplete');
    });
    const dockerMbMs = await medianOf(() => run('docker', ['exec', '--user', '1000', container, 'bash', '-c', mbCmd], { maxBuffer: 4 * 1024 * 1024 }));

    const text = 'x'.repeat(1023).concat('\n').repeat(1024);
    await client.submitCall(id, 'write_file', { path: '/workspace/bench.txt', content: text }, { waitSeconds: 30 });
    const readMs = await medianOf(async () => {
      const r = await client.submitCall(id, 'read_file', { path: '/workspace/bench.txt', limit: 2000 }, { waitSeconds: 30 });
      if (!('data' in r) || (r.data as { content?: string } | null)?.content !== text) throw new Error('read_file returned other content');
    });
    const dockerCatMs = await medianOf(() => run('docker', ['exec', '--user', '1000', container, 'cat', '/workspace/bench.txt'], { maxBuffer: 4 * 1024 * 1024 }));

    const rows = [
      ['lease (ready, manifest built)', leaseMs, 'docker run --rm true', dockerRunMs],
      ['exec echo round trip', echoMs, 'docker exec echo', dockerExecMs],
      ['exec 1 MB output, complete', mbMs, 'docker exec 1 MB', dockerMbMs],
      ['read_file 1 MiB (with sha256)', readMs, 'docker exec cat 1 MiB', dockerCatMs],
    ] as const;
    process.stdout.write(`sbx bench: median of ${RUNS} runs each (after one warm-up), same machine, same run\n\n`);
    process.stdout.write(`${'measure'.padEnd(32)}${'sbx ms'.padStart(10)}  ${'baseline'.padEnd(24)}${'ms'.padStart(8)}${'ratio'.padStart(9)}\n`);
    for (const [name, ours, baseName, base] of rows) {
      process.stdout.write(`${name.padEnd(32)}${ours.toFixed(1).padStart(10)}  ${baseName.padEnd(24)}${base.toFixed(1).padStart(8)}${(ours / base).toFixed(2).padStart(8)}x\n`);
    }
  } finally {
    for (const id of leases) await plane.leases.release(id, BOOTSTRAP_PRINCIPAL).catch(() => undefined);
    await plane.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
