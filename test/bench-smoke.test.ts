/**
 * The bench harness runs end to end and writes results that match its schema — with tiny
 * counts, against the built control plane (dist/, which `npm test`'s set-up builds). No timing
 * is asserted here: figures may miss their targets; the harness may not fail.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FIGURES, runBench } from '../bench/run.js';
import { Results } from '../bench/schema.js';
import { readSettings } from '../bench/settings.js';
import { renderTable } from '../bench/table.js';
import { REPO_ROOT, ownerPrefix, redisRunPrefix, useRedisPrefix } from './fixtures/index.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-bench-smoke-'));
// The bench's control planes and baselines carry an owner and a Redis prefix of this test run (test/leftovers.sh finds them).
process.env.SBX_BENCH_OWNER_PREFIX = `${ownerPrefix()}bench-`;
const benchPrefix = `${redisRunPrefix()}bench-`;
process.env.SBX_BENCH_REDIS_PREFIX = benchPrefix;
const { redis } = useRedisPrefix(benchPrefix);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('bench smoke', () => {
  it('runs every figure with tiny counts and writes valid JSON', async () => {
    const out = join(dir, 'results.json');
    const settings = readSettings({
      SBX_BENCH_LEASES: '1',
      SBX_BENCH_WARM_LEASES: '1',
      SBX_BENCH_CALLS: '2',
      SBX_BENCH_THROUGHPUT_SANDBOXES: '1',
      SBX_BENCH_THROUGHPUT_CONCURRENCY: '2',
      SBX_BENCH_THROUGHPUT_SECONDS: '0.5',
      SBX_BENCH_STREAM_BYTES: '6000000',
      SBX_BENCH_STREAM_RUNS: '1',
      SBX_BENCH_FILES: '2',
      SBX_BENCH_UPLOAD_BYTES: '2000000',
      SBX_BENCH_UPLOAD_RUNS: '1',
      SBX_BENCH_DENSITY: '2',
      SBX_BENCH_BURST: '2',
      SBX_BENCH_CPU_CALLS: '4',
      SBX_BENCH_OUT: out,
    });
    const { results, path } = await runBench(settings, REPO_ROOT, () => undefined);
    expect(path).toBe(out);
    const written = Results.parse(JSON.parse(readFileSync(out, 'utf8')));
    expect(written).toEqual(results);
    expect(written.failures).toEqual([]);
    expect(written.figures.map((f) => f.id)).toEqual(FIGURES.map((f) => f.id));
    const reportOnly = new Set(FIGURES.filter((f) => f.reportOnly).map((f) => f.id));
    for (const f of written.figures) {
      expect(f.ours.stats.count).toBeGreaterThan(0);
      // Its wall time: 0 ms for the floor when it reports exec-rtt's samples.
      expect(f.durationMs).toBeGreaterThanOrEqual(0);
      // A figure with a target states it; one the issue only asks to report has none.
      expect(f.targets.length > 0).toBe(!reportOnly.has(f.id));
      if (f.baseline) expect(f.baseline.stats.count).toBeGreaterThan(0);
    }
    expect(renderTable(written)).toContain('| figure |');
    expect(renderTable(written)).toContain('time per figure (s): lease-cold ');
    // A plane's ledger would otherwise stay for the retention (7 days), in every later snapshot of Redis.
    expect(await redis().keys(`${benchPrefix}*`)).toEqual([]);
  }, 360_000);

  it('refuses a figure id it does not know', async () => {
    await expect(runBench(readSettings({ SBX_BENCH_ONLY: 'nope', SBX_BENCH_OUT: join(dir, 'x.json') }), REPO_ROOT)).rejects.toThrow(
      /unknown figures: nope/,
    );
  });
});
