/**
 * `npm run bench`: what sbx costs next to the raw Docker Engine API (dockerode), every figure
 * measured side by side in one run on the same machine, image and containers, so that a ratio
 * survives a noisy machine. Starts its own control plane (bench/plane.ts) against the Docker
 * engine and Redis that deploy/local/setup.sh started, runs the figures in bench/figures/ one
 * after another (a few hand work to the next: see `Carried` in bench/context.ts), prints one
 * Markdown table with the time each figure took and writes the results (bench/schema.ts) to
 * `bench/results/latest.json` (a full run) or `bench/results/only-<ids>.json`. Settings: bench/settings.ts (`SBX_BENCH_*`). Everything it makes
 * carries its own `sbx.owner` label and Redis prefix and is removed at the end.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeOwned } from './baseline.js';
import { BenchContext } from './context.js';
import { burstCold, burstPool, burstWarm, BURST_POLICY, primeBurstPool } from './figures/burst.js';
import { controlPlaneCpu } from './figures/cp-cpu.js';
import { density } from './figures/density.js';
import { downloadTree } from './figures/download.js';
import { egressHttps } from './figures/egress-https.js';
import { startBenchUpstream } from './egress-upstream.js';
import { execRoundTrip } from './figures/exec-rtt.js';
import { floor } from './figures/floor.js';
import { sessionRoundTrip } from './figures/session-rtt.js';
import { filesReadWrite } from './figures/files-rw.js';
import { leaseByo } from './figures/lease-byo.js';
import { leaseByoImage } from './figures/lease-byo-image.js';
import { forkOfN } from './figures/fork.js';
import { leaseFromSnapshot } from './figures/lease-from-snapshot.js';
import { leaseCold } from './figures/lease-cold.js';
import { leaseWarm, WARM_POLICY } from './figures/lease-warm.js';
import { pauseResume } from './figures/pause-resume.js';
import { previewRoundTrip } from './figures/preview.js';
import { snapshotOf } from './figures/snapshot.js';
import { stdoutFirstByte } from './figures/stdout-first-byte.js';
import { stdoutStream } from './figures/stdout-stream.js';
import { terminalEcho } from './figures/terminal-echo.js';
import { throughput } from './figures/throughput.js';
import { uploadTree } from './figures/upload.js';
import { startPlane } from './plane.js';
import { Results, type Figure } from './schema.js';
import { flatSettings, readSettings, type Settings } from './settings.js';
import { renderTable, rows } from './table.js';

/** One row of the table: its id (`SBX_BENCH_ONLY` selects by it) and how it is measured. */
export interface FigureEntry {
  id: string;
  run: (ctx: BenchContext) => Promise<Figure>;
  /**
   * Untimed preparation that may overlap an earlier figure's untimed work: run once figure
   * `after` finished (or just before this one when `after` does not run).
   */
  prepare?: { after: string; run: (ctx: BenchContext) => Promise<void> };
  /** Only figures this report without a target (the issue asks for the number, sets no bound). */
  reportOnly?: true;
}

/**
 * The figures, in the order they run. Neighbours share work where it biases nothing:
 * exec-rtt samples the floor between its calls (same load on both), throughput hands its warmed
 * sandboxes to cp-cpu, burst-cold hands its sandboxes to density (memory, not time), and the
 * burst pool fills while density runs. burst-warm is last: its pool refills after the burst.
 */
export const FIGURES: readonly FigureEntry[] = [
  { id: 'lease-cold', run: leaseCold },
  { id: 'lease-warm', run: leaseWarm },
  { id: 'lease-byo', run: leaseByo },
  { id: 'lease-byo-image', run: leaseByoImage },
  { id: 'exec-rtt', run: execRoundTrip },
  { id: 'floor', run: floor, reportOnly: true },
  { id: 'session-rtt', run: sessionRoundTrip },
  { id: 'terminal-echo', run: terminalEcho },
  { id: 'stdout-first-byte', run: stdoutFirstByte },
  { id: 'throughput', run: throughput },
  { id: 'cp-cpu', run: controlPlaneCpu, reportOnly: true },
  { id: 'stdout-stream', run: stdoutStream },
  { id: 'files-rw', run: filesReadWrite },
  { id: 'upload', run: uploadTree },
  { id: 'download', run: downloadTree },
  { id: 'pause-resume', run: pauseResume },
  { id: 'fork', run: forkOfN },
  { id: 'snapshot', run: snapshotOf },
  { id: 'lease-from-snapshot', run: leaseFromSnapshot },
  { id: 'preview', run: previewRoundTrip },
  { id: 'egress-https', run: egressHttps, reportOnly: true },
  { id: 'burst-cold', run: burstCold },
  { id: 'density', run: density },
  { id: 'burst-warm', run: burstWarm, prepare: { after: 'burst-cold', run: primeBurstPool } },
];

/** The checkout (this file is dist/bench/run.js or bench/run.ts). */
export function repoRootOf(url: string): string {
  const here = dirname(fileURLToPath(url));
  return here.includes(`${join('dist', 'bench')}`) ? resolve(here, '..', '..') : resolve(here, '..');
}

function git(repoRoot: string, ...args: string[]): string {
  try {
    return execFileSync('git', args, { cwd: repoRoot, encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

/** Copies `default` into the warm-pool policies (their pools were configured when the plane started). */
async function createPoolPolicies(ctx: BenchContext): Promise<void> {
  const auth = { authorization: `Bearer ${ctx.plane.apiKey}` };
  const defaults = (await (await fetch(`${ctx.plane.url}/v1/policies/default`, { headers: auth })).json()) as {
    policy: Record<string, unknown>;
  };
  for (const name of [WARM_POLICY, BURST_POLICY]) {
    const put = await fetch(`${ctx.plane.url}/v1/policies/${name}`, {
      method: 'PUT',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ ...defaults.policy, name, version: 1, description: 'default, with a warm pool (bench)' }),
    });
    if (!put.ok) throw new Error(`could not create the ${name} policy: ${await put.text()}`);
  }
}

/**
 * Runs the selected figures and writes the results; returns them with the path written.
 * A figure that throws is recorded under `failures` and the others still run.
 */
export async function runBench(
  settings: Settings,
  repoRoot: string,
  log: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): Promise<{ results: Results; path: string }> {
  const started = Date.now();
  const selected = FIGURES.filter((f) => settings.only.length === 0 || settings.only.includes(f.id));
  const unknown = settings.only.filter((id) => !FIGURES.some((f) => f.id === id));
  if (unknown.length > 0)
    throw new Error(`SBX_BENCH_ONLY names unknown figures: ${unknown.join(', ')} (known: ${FIGURES.map((f) => f.id).join(', ')})`);
  const loadStart = os.loadavg()[0]!;
  const runs = (id: string): boolean => selected.some((f) => f.id === id);
  // Before the plane: its egress proxy is told where the bench's HTTPS server is and to trust it.
  const egressUpstream = runs('egress-https') ? await startBenchUpstream() : undefined;
  const plane = await startPlane({
    repoRoot,
    ...(egressUpstream ? { env: egressUpstream.planeEnv } : {}),
    warmPools: [
      ...(runs('lease-warm') ? [{ policy: WARM_POLICY, min: 2, max: 2 }] : []),
      ...(runs('burst-warm') ? [burstPool(settings.burst)] : []),
    ],
    cpuProfDir: settings.cpuProfDir,
  }).catch(async (err: unknown) => {
    await egressUpstream?.close();
    throw err;
  });
  const ctx = new BenchContext(plane, settings, log, new Set(selected.map((f) => f.id)));
  ctx.carried.egressUpstream = egressUpstream;
  const figures: Figure[] = [];
  const failures: Array<{ id: string; message: string }> = [];
  let otherContainers = 0;
  let dockerVersion = 'unknown';
  // Each step runs whatever the one before did: a plane that failed to stop still leaves no container (its stop removes its Redis keys).
  const cleanUp = async (): Promise<void> => {
    const failed = (step: string) => (err: unknown) => log(`bench: ${step} failed: ${err instanceof Error ? err.message : String(err)}`);
    await ctx.close().catch(failed('closing the bench context'));
    await plane.stop().catch(failed('stopping the control plane'));
    await removeOwned(ctx.docker, plane.config.owner).catch(failed('removing the containers'));
    await egressUpstream?.close().catch(failed('stopping the egress upstream'));
  };
  // Interrupted (Ctrl-C, a timeout's TERM), the run still removes what it made before it exits:
  // the plane stops at once, so the figure under way fails soon; no other figure starts; the
  // cleanup below then runs after the figure's own, when nothing is being made any more. A second
  // signal removes what exists now and exits at once.
  let interrupted: NodeJS.Signals | null = null;
  const exitCode = (signal: NodeJS.Signals): number => (signal === 'SIGINT' ? 130 : 143);
  const onSignal = (signal: NodeJS.Signals): void => {
    if (interrupted !== null) {
      void removeOwned(ctx.docker, plane.config.owner)
        .catch(() => undefined)
        .finally(() => process.exit(exitCode(signal)));
      return;
    }
    interrupted = signal;
    log(`bench: ${signal}: stopping, then removing what the run made (another signal: at once)`);
    void plane.stop().catch(() => undefined);
  };
  process.on('SIGINT', onSignal).on('SIGTERM', onSignal);
  try {
    dockerVersion = ((await ctx.docker.version()) as { Version: string }).Version;
    const running = await ctx.docker.listContainers();
    otherContainers = running.filter((c) => c.Labels?.['sbx.owner'] !== plane.config.owner).length;
    await createPoolPolicies(ctx);
    const prepared = new Set<string>();
    const prepare = async (f: FigureEntry): Promise<void> => {
      if (!f.prepare || prepared.has(f.id)) return;
      prepared.add(f.id);
      await f.prepare
        .run(ctx)
        .catch((err: unknown) => log(`bench: preparing ${f.id} failed: ${err instanceof Error ? err.message : String(err)}`));
    };
    for (const f of selected) {
      if (interrupted !== null) break;
      const t0 = Date.now();
      log(`bench: ${f.id} ...`);
      try {
        await prepare(f);
        const result = await f.run(ctx);
        figures.push({ ...result, durationMs: Date.now() - t0 });
        // Its rows at once, so a run cut short still shows what it measured.
        log(`bench: ${f.id} done in ${((Date.now() - t0) / 1000).toFixed(1)} s\n${rows(result).join('\n')}`);
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        failures.push({ id: f.id, message });
        log(`bench: ${f.id} FAILED: ${message}`);
      }
      for (const later of selected) if (later.prepare?.after === f.id) await prepare(later);
    }
  } finally {
    await cleanUp();
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    if (interrupted !== null) process.exit(exitCode(interrupted));
  }
  const cpus = os.cpus();
  const results = Results.parse({
    schema: 'sbx-bench/1',
    date: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    git: {
      commit: git(repoRoot, 'rev-parse', 'HEAD'),
      branch: git(repoRoot, 'rev-parse', '--abbrev-ref', 'HEAD'),
      dirty: git(repoRoot, 'status', '--porcelain', '--untracked-files=no') !== '',
    },
    machine: {
      hostname: os.hostname(),
      platform: os.platform(),
      release: os.release(),
      arch: os.arch(),
      cpuModel: cpus[0]?.model ?? 'unknown',
      cpus: cpus.length,
      totalMemoryBytes: os.totalmem(),
      node: process.version,
      dockerVersion,
      loadAverage: { start: loadStart, end: os.loadavg()[0]! },
      otherContainersAtStart: otherContainers,
    },
    settings: flatSettings(settings),
    figures,
    failures,
  });
  const path =
    settings.out ?? join(repoRoot, 'bench', 'results', settings.only.length === 0 ? 'latest.json' : `only-${settings.only.join('+')}.json`);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(results, null, 2)}\n`);
  return { results, path };
}

/** Removes the plane's Redis keys (its prefix only): ledger, queues, pools. */
async function main(): Promise<void> {
  // A reader that went away (`| head`) must not end the run before it removed what it made: an
  // unhandled EPIPE on stdout or stderr would. What it no longer reads is lost, nothing else.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined);
  const settings = readSettings(process.env);
  const { results, path } = await runBench(settings, repoRootOf(import.meta.url));
  process.stdout.write(`${renderTable(results)}\n\nwritten to ${path}\n`);
  if (results.failures.length > 0) process.exitCode = 1;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
