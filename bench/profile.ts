/**
 * `npm run bench:profile`: where the time of one bench workload goes. Starts a control plane
 * with `--cpu-prof`, leases one sandbox, profiles its agent in place (cpu-profile.ts) while the
 * workload runs, stops the plane (which writes its profile), and prints the top self time of
 * both. Profiles go to `bench/results/profiles/<workload>-<time>/` (open them in Chrome
 * DevTools or speedscope). `SBX_PROFILE_WORKLOAD`: `exec` (sequential `exec true`),
 * `concurrent` (8 callers of `exec true`), `stream` (200 MB stdout + artifact), `files`
 * (write_file + read_file of 4 KiB), `preview` (GETs of 1 KiB from python3's http.server through a port preview), `upload` (100 MB tar), `lease` (cold leases; no agent profile).
 * `SBX_PROFILE_COUNT` scales it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';
import { removeOwned, tarOf } from './baseline.js';
import { BenchContext } from './context.js';
import { profileAgent, topSelfTime } from './cpu-profile.js';
import { startPlane } from './plane.js';
import { getSmall, putPreviewPolicy, startPreviewServer } from './figures/preview.js';
import { repoRootOf } from './run.js';
import { readSettings } from './settings.js';
import { MiB, closedLoop, mapLimit } from './stats.js';

type Workload = (ctx: BenchContext, id: string, count: number) => Promise<void>;

/** A workload: its default count, what it runs, and the policy of its lease (default: the plane's default). */
const WORKLOADS: Record<string, { count: number; run: Workload; policy?: (ctx: BenchContext) => Promise<string> }> = {
  exec: {
    count: 300,
    run: async (ctx, id, n) => {
      for (let i = 0; i < n; i += 1) await ctx.call(id, 'exec', { argv: ['true'] }, 30);
    },
  },
  concurrent: {
    count: 8,
    run: async (ctx, id, n) => void (await closedLoop(n, 8000, () => ctx.call(id, 'exec', { argv: ['true'] }, 60).then(() => undefined))),
  },
  stream: {
    count: 200_000_000,
    run: async (ctx, id, n) => {
      const r = await ctx.call(id, 'exec', { argv: ['head', '-c', String(n), '/dev/zero'] }, 300);
      const hash = createHash('sha256');
      for await (const c of await ctx.client.artifact(id, r.truncation!.stdout!.fullArtifact!)) hash.update(c as Buffer);
    },
  },
  files: {
    count: 300,
    run: async (ctx, id, n) => {
      for (let i = 0; i < n; i += 1) {
        await ctx.call(id, 'write_file', { path: `/workspace/p/f${i}.txt`, content: 'x'.repeat(63).concat('\n').repeat(64) }, 30);
        await ctx.call(id, 'read_file', { path: `/workspace/p/f${i}.txt` }, 30);
      }
    },
  },
  upload: {
    count: 3,
    run: async (ctx, id, n) => {
      const tar = await tarOf(Array.from({ length: 96 }, (_, i): [string, Buffer] => [`tree/d${i % 10}/f${i}.bin`, randomBytes(MiB)]));
      for (let i = 0; i < n; i += 1) await ctx.client.uploadTar(id, `/workspace/up${i}`, tar);
    },
  },
  preview: {
    count: 500,
    policy: putPreviewPolicy,
    run: async (ctx, id, n) => {
      const { preview, auth } = await startPreviewServer(ctx, id);
      for (let i = 0; i < n; i += 1) await getSmall(preview, auth);
    },
  },
  lease: { count: 10, run: async (ctx, _id, n) => void (await mapLimit(n, 1, async () => ctx.release(await ctx.lease()))) },
};

function show(title: string, profileJson: string): string {
  const rows = topSelfTime(profileJson, 20).map(
    (r) => `  ${(r.share * 100).toFixed(1).padStart(5)}%  ${r.ms.toFixed(0).padStart(7)} ms  ${r.fn}`,
  );
  return `${title}\n${rows.join('\n')}\n`;
}

async function main(): Promise<void> {
  const name = process.env.SBX_PROFILE_WORKLOAD ?? 'exec';
  const workload = WORKLOADS[name];
  if (!workload) throw new Error(`SBX_PROFILE_WORKLOAD must be one of ${Object.keys(WORKLOADS).join(', ')}`);
  const count = Number(process.env.SBX_PROFILE_COUNT ?? workload.count);
  const repoRoot = repoRootOf(import.meta.url);
  const dir = join(repoRoot, 'bench', 'results', 'profiles', `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  const plane = await startPlane({ repoRoot, warmPools: [], cpuProfDir: dir });
  const ctx = new BenchContext(plane, readSettings({}), (l) => process.stderr.write(`${l}\n`));
  let agentProfile: string | undefined;
  try {
    const id = await ctx.lease(workload.policy ? await workload.policy(ctx) : undefined);
    await ctx.call(id, 'exec', { argv: ['mkdir', '-p', '/workspace/p'] });
    const started = performance.now();
    if (name === 'lease') await workload.run(ctx, id, count);
    else
      agentProfile = await profileAgent(ctx.docker, ctx.container(id), Number(process.env.SBX_PROFILE_SECONDS ?? 20) * 1000, () =>
        workload.run(ctx, id, count),
      );
    process.stderr.write(`workload ${name} × ${count}: ${(performance.now() - started).toFixed(0)} ms (profiler start included)\n`);
    if (agentProfile) writeFileSync(join(dir, 'agent.cpuprofile'), agentProfile);
  } finally {
    await ctx.close();
    await plane.stop();
    await removeOwned(ctx.docker, plane.config.owner);
  }
  const planeFile = readdirSync(dir).find((f) => f.startsWith('control-plane'));
  if (planeFile)
    process.stdout.write(
      show(`control plane (${join(dir, planeFile)}), whole run, top self time:`, readFileSync(join(dir, planeFile), 'utf8')),
    );
  if (agentProfile)
    process.stdout.write(show(`agent (${join(dir, 'agent.cpuprofile')}), during the workload, top self time:`, agentProfile));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`bench:profile: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
