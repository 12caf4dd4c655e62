/**
 * `npm run bench:kubernetes`: the Kubernetes driver on the 3-node lab (test/lab/) against the
 * Docker driver on this machine's engine, in one run, with the same sandbox image, the same
 * figures and the same client; samples alternate between the two drivers, so load from elsewhere
 * falls on both. Two control planes (bench/plane.ts), one per driver, each with a warm pool of
 * its own. test/lab/kubernetes-suite.sh bench brings the lab up around it and runs it in the
 * lab's hub network namespace.
 *
 * Figures (every one reports both drivers and the ratio Kubernetes ÷ Docker of the p50; the issue
 * sets no bound, so none is a target):
 * - lease cold: `POST /v1/sandboxes` → ready, policy `default`, no pool;
 * - lease warm: the same with a pool's ready sandbox waiting (claim + bind);
 * - exec true: `POST .../calls?wait` of `exec true`, one at a time;
 * - density: N sandboxes leased C at a time, each then answering `exec true`: the wall time until
 *   all answered, the lease latency under that load, and host memory per sandbox (the drop of
 *   MemAvailable, /proc/meminfo, over the N; the lab's nodes run on this host too).
 *
 * Settings: SBX_BENCH_K8S_LEASES (8), SBX_BENCH_K8S_CALLS (50), SBX_BENCH_K8S_DENSITY (16),
 * SBX_BENCH_K8S_CONCURRENCY (8). Writes bench/results/kubernetes.json.
 */
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { connectRedis, redisOptions } from '../control-plane/redis/connections.js';
import { SbxClient } from '../sdk/index.js';
import { removeOwned } from './baseline.js';
import { startPlane, type RunningPlane } from './plane.js';
import type { Stats } from './schema.js';
import { mapLimit, summarize, timeMs } from './stats.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const WARM_POLICY = 'bench-warm';
const DRIVERS = ['docker', 'kubernetes'] as const;
type DriverName = (typeof DRIVERS)[number];

interface Driver {
  name: DriverName;
  plane: RunningPlane;
  client: SbxClient;
}

/** One figure: each driver's samples (ms, or MiB for memory) and what they are. */
interface Row {
  id: string;
  what: string;
  unit: 'ms' | 'MiB' | 's';
  stats: Record<DriverName, Stats>;
}

function setting(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
}

const settings = {
  leases: setting('SBX_BENCH_K8S_LEASES', 8),
  calls: setting('SBX_BENCH_K8S_CALLS', 50),
  density: setting('SBX_BENCH_K8S_DENSITY', 16),
  concurrency: setting('SBX_BENCH_K8S_CONCURRENCY', 8),
};

const log = (line: string): void => void process.stderr.write(`bench:kubernetes: ${line}\n`);

/** The lab's settings, as test/lab/k8s-lab.sh wrote them into the environment. */
function labEnv(namespace: string): Record<string, string> {
  const need = [
    'SBX_K8S_KUBECONFIG',
    'SBX_LAB_REGISTRY',
    'SBX_LAB_RELAY_DIR',
    'SBX_LAB_LINK_LISTEN',
    'SBX_LAB_TLS_CERT',
    'SBX_LAB_TLS_KEY',
  ];
  const missing = need.filter((name) => !process.env[name]);
  if (missing.length > 0) throw new Error(`no lab cluster (${missing.join(', ')} unset): run test/lab/kubernetes-suite.sh bench`);
  const image = readFileSync(join(REPO_ROOT, 'dist', '.sbx-image'), 'utf8').trim();
  return {
    SBX_RUNTIME: 'kubernetes',
    SBX_K8S_KUBECONFIG: process.env.SBX_K8S_KUBECONFIG!,
    SBX_K8S_NAMESPACE: namespace,
    SBX_K8S_PLAIN_HTTP_REGISTRIES: process.env.SBX_LAB_REGISTRY!,
    SBX_IMAGE: `${process.env.SBX_LAB_REGISTRY}/${image}`,
    SBX_K8S_NODE_PIDS_LIMIT: '512',
    SBX_AGENT_RELAY_DIR: process.env.SBX_LAB_RELAY_DIR!,
    SBX_LINK_LISTEN: process.env.SBX_LAB_LINK_LISTEN!,
    SBX_LINK_TLS_CERT: process.env.SBX_LAB_TLS_CERT!,
    SBX_LINK_TLS_KEY: process.env.SBX_LAB_TLS_KEY!,
    // A twentieth of a policy's CPUs requested per sandbox (0.1 CPU for `default`'s 2) (default: a quarter of the policy's 2): the lab's two
    // runc nodes, 2 CPUs each, would hold 8 default sandboxes; density measures memory, not requests.
    SBX_K8S_CPU_REQUEST_FRACTION: '0.05',
  };
}

/** A lease of `policy` on `driver`, ready; throws otherwise. */
async function lease(driver: Driver, policy = 'default'): Promise<string> {
  const made = await driver.client.createSandbox({ policy });
  if (made.status !== 'ready') throw new Error(`${driver.name}: lease ${made.id} is ${made.status}`);
  return made.id;
}

async function execTrue(driver: Driver, id: string): Promise<void> {
  const r = await driver.client.submitCall(id, 'exec', { argv: ['true'] }, { waitSeconds: 60 });
  if (!('receipt' in r) || r.status !== 'succeeded') throw new Error(`${driver.name}: exec true did not succeed: ${JSON.stringify(r)}`);
}

/** Waits until `driver`'s warm pool of WARM_POLICY holds a ready sandbox. */
async function poolReady(driver: Driver): Promise<void> {
  const deadline = Date.now() + 180_000;
  const key = `${driver.plane.config.redisPrefix}pool:${WARM_POLICY}@${driver.plane.config.image}:ready`;
  const redis = connectRedis(redisOptions(driver.plane.config.redis));
  try {
    while ((await redis.llen(key)) === 0) {
      if (Date.now() > deadline) throw new Error(`${driver.name}: the warm pool held no ready sandbox within 180 s`);
      await new Promise((r) => setTimeout(r, 25));
    }
  } finally {
    redis.disconnect();
  }
}

/** `samples` rounds; each round measures `measure` on both drivers, in alternating order. One warm-up round is not kept. */
async function alternating(
  drivers: Driver[],
  samples: number,
  measure: (d: Driver) => Promise<number>,
): Promise<Record<DriverName, number[]>> {
  const out: Record<DriverName, number[]> = { docker: [], kubernetes: [] };
  for (let i = -1; i < samples; i += 1) {
    const order = i % 2 === 0 ? drivers : [...drivers].reverse();
    for (const driver of order) {
      const value = await measure(driver);
      if (i >= 0) out[driver.name].push(value);
    }
  }
  return out;
}

function statsOf(samples: Record<DriverName, number[]>): Record<DriverName, Stats> {
  return { docker: summarize(samples.docker), kubernetes: summarize(samples.kubernetes) };
}

function memAvailableBytes(): number {
  const kb = /MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1];
  return Number(kb) * 1024;
}

async function density(driver: Driver): Promise<{ wallS: number; latenciesMs: number[]; perSandboxMiB: number }> {
  const before = memAvailableBytes();
  const ids: string[] = [];
  const latenciesMs: number[] = [];
  const started = performance.now();
  await mapLimit(settings.density, settings.concurrency, async () => {
    let id = '';
    latenciesMs.push(await timeMs(async () => (id = await lease(driver))));
    ids.push(id);
  });
  await mapLimit(ids.length, settings.concurrency, (i) => execTrue(driver, ids[i]!));
  const wallS = (performance.now() - started) / 1000;
  const perSandboxMiB = (before - memAvailableBytes()) / ids.length / 2 ** 20;
  await mapLimit(ids.length, settings.concurrency, (i) => driver.client.releaseSandbox(ids[i]!));
  return { wallS, latenciesMs, perSandboxMiB };
}

function renderRows(rows: Row[]): string {
  const format = (s: Stats, unit: Row['unit']): string => `${s.p50.toFixed(unit === 'ms' ? 1 : 2)} ${unit}`;
  const lines = [
    '| figure | Docker driver (p50) | Kubernetes driver, 3-node lab (p50) | Kubernetes ÷ Docker | samples |',
    '|---|---|---|---|---|',
  ];
  for (const row of rows) {
    lines.push(
      `| ${row.what} | ${format(row.stats.docker, row.unit)} | ${format(row.stats.kubernetes, row.unit)} | ` +
        `${(row.stats.kubernetes.p50 / row.stats.docker.p50).toFixed(2)}× | ${row.stats.docker.count} + ${row.stats.kubernetes.count} |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const tag = randomBytes(3).toString('hex');
  const namespace = `sbx-bench-${tag}`;
  const kc = new KubeConfig();
  kc.loadFromFile(labEnv(namespace).SBX_K8S_KUBECONFIG!);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const pools = [{ policy: WARM_POLICY, min: 1, max: 1 }];
  const drivers: Driver[] = [];
  try {
    for (const name of DRIVERS) {
      const plane = await startPlane({ repoRoot: REPO_ROOT, warmPools: pools, env: name === 'kubernetes' ? labEnv(namespace) : {} });
      drivers.push({ name, plane, client: new SbxClient(plane.url, plane.apiKey) });
    }
    for (const { plane } of drivers) {
      const auth = { authorization: `Bearer ${plane.apiKey}`, 'content-type': 'application/json' };
      const policy = (await (await fetch(`${plane.url}/v1/policies/default`, { headers: auth })).json()) as {
        policy: Record<string, unknown>;
      };
      const { name: _name, version: _version, ...body } = policy.policy;
      const put = await fetch(`${plane.url}/v1/policies/${WARM_POLICY}`, { method: 'PUT', headers: auth, body: JSON.stringify(body) });
      if (!put.ok) throw new Error(`storing policy ${WARM_POLICY}: ${put.status} ${await put.text()}`);
    }
    const rows: Row[] = [];
    log(`lease cold, ${settings.leases} samples a driver`);
    const cold = await alternating(drivers, settings.leases, async (d) => {
      let id = '';
      const t = await timeMs(async () => (id = await lease(d)));
      await d.client.releaseSandbox(id);
      return t;
    });
    rows.push({ id: 'lease-cold', what: 'lease cold: POST /v1/sandboxes → ready', unit: 'ms', stats: statsOf(cold) });
    log(`lease warm, ${settings.leases} samples a driver`);
    const warm = await alternating(drivers, settings.leases, async (d) => {
      await poolReady(d);
      let id = '';
      const t = await timeMs(async () => (id = await lease(d, WARM_POLICY)));
      await d.client.releaseSandbox(id);
      return t;
    });
    rows.push({ id: 'lease-warm', what: 'lease warm: the same, a pool sandbox ready', unit: 'ms', stats: statsOf(warm) });
    log(`exec true, ${settings.calls} calls a driver`);
    const held = new Map<DriverName, string>();
    for (const d of drivers) held.set(d.name, await lease(d));
    const exec = await alternating(drivers, settings.calls, (d) => timeMs(() => execTrue(d, held.get(d.name)!)));
    for (const d of drivers) await d.client.releaseSandbox(held.get(d.name)!);
    rows.push({ id: 'exec-rtt', what: 'exec true round trip', unit: 'ms', stats: statsOf(exec) });
    log(`density, ${settings.density} sandboxes a driver, ${settings.concurrency} at a time`);
    const dense = { docker: await density(drivers[0]!), kubernetes: await density(drivers[1]!) };
    const one = (f: (r: Awaited<ReturnType<typeof density>>) => number): Record<DriverName, Stats> => ({
      docker: summarize([f(dense.docker)]),
      kubernetes: summarize([f(dense.kubernetes)]),
    });
    rows.push({
      id: 'density-wall',
      what: `density: ${settings.density} leased and answering exec true`,
      unit: 's',
      stats: one((r) => r.wallS),
    });
    rows.push({
      id: 'density-lease',
      what: `density: lease latency, ${settings.concurrency} in flight`,
      unit: 'ms',
      stats: { docker: summarize(dense.docker.latenciesMs), kubernetes: summarize(dense.kubernetes.latenciesMs) },
    });
    rows.push({ id: 'density-memory', what: 'density: host memory per idle sandbox', unit: 'MiB', stats: one((r) => r.perSandboxMiB) });
    const table = renderRows(rows);
    process.stdout.write(`${table}\n`);
    const out = join(REPO_ROOT, 'bench', 'results', 'kubernetes.json');
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify({ at: new Date().toISOString(), settings, rows }, null, 2)}\n`);
    log(`wrote ${out}`);
  } finally {
    // What a plane leaves (its pool's sandbox, one being made) goes by its owner label and its namespace; its stop drops its key prefix.
    for (const d of drivers) {
      await d.plane.stop().catch((err: unknown) => log(`stopping the ${d.name} plane failed: ${String(err)}`));
      if (d.name === 'docker') await removeOwned(new Docker({ socketPath: d.plane.config.dockerSocket }), d.plane.config.owner);
    }
    await core.deleteNamespace({ name: namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:kubernetes: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
