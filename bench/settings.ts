/**
 * Counts and durations of `npm run bench`, from `SBX_BENCH_*` environment variables. The
 * defaults fit a full run into 10 minutes on a 2-core machine; the smoke test sets them tiny.
 */
import { z } from 'zod';

const count = (fallback: number) => z.coerce.number().int().positive().default(fallback);

const Env = z.object({
  /** Cold leases, and as many dockerode create+start baselines. */
  SBX_BENCH_LEASES: count(10),
  /** Warm-pool leases (each waits for the pool to hold a ready sandbox first). */
  SBX_BENCH_WARM_LEASES: count(10),
  /** Sequential `exec true` round trips, ours and the baseline's each. */
  SBX_BENCH_CALLS: count(100),
  /** Throughput: sandboxes, concurrent calls per sandbox, seconds per side. */
  SBX_BENCH_THROUGHPUT_SANDBOXES: count(20),
  SBX_BENCH_THROUGHPUT_CONCURRENCY: count(8),
  SBX_BENCH_THROUGHPUT_SECONDS: z.coerce.number().positive().default(10),
  /** stdout streaming: bytes per run and runs per side. */
  SBX_BENCH_STREAM_BYTES: count(200_000_000),
  SBX_BENCH_STREAM_RUNS: count(2),
  /** Files written and read back, and the size of each (bytes). */
  SBX_BENCH_FILES: count(1000),
  SBX_BENCH_FILE_BYTES: count(4096),
  /**
   * Of those files, how many the baseline also writes and reads (every k-th, spread evenly over
   * the run). 100, not 250: each baseline file costs ~220 ms (putArchive + getArchive), and 250 of
   * them were 55 s of a run that must end within 10 minutes; 100 samples still give its p50.
   */
  SBX_BENCH_FILES_BASELINE: count(100),
  /** Upload: total tree size (bytes, in files of 1 MiB or less) and runs per side. */
  SBX_BENCH_UPLOAD_BYTES: count(100_000_000),
  SBX_BENCH_UPLOAD_RUNS: count(3),
  /** Density: idle sandboxes leased at once, and how many creates are in flight at a time. */
  SBX_BENCH_DENSITY: count(100),
  SBX_BENCH_DENSITY_CONCURRENCY: count(4),
  /** Burst: creates started at once (cold, and warm from a pool of as many; at most 100, a pool's limit). */
  SBX_BENCH_BURST: count(100),
  /** Control-plane CPU: `exec true` calls between the two readings of its CPU time. */
  SBX_BENCH_CPU_CALLS: count(1000),
  /** Comma-separated figure ids to run (default: all). */
  SBX_BENCH_ONLY: z.string().default(''),
  /** Where the results go (default bench/results/latest.json in the checkout). */
  SBX_BENCH_OUT: z.string().optional(),
  /** A directory: the control plane runs with `--cpu-prof` and writes its profile there. */
  SBX_BENCH_CPU_PROF: z.string().optional(),
});

export interface Settings {
  leases: number;
  warmLeases: number;
  calls: number;
  throughput: { sandboxes: number; concurrency: number; seconds: number };
  stream: { bytes: number; runs: number };
  /** `baseline`: how many of the `count` files the baseline also writes and reads. */
  files: { count: number; bytes: number; baseline: number };
  upload: { bytes: number; runs: number };
  density: { sandboxes: number; concurrency: number };
  burst: number;
  cpuCalls: number;
  only: string[];
  out: string | undefined;
  cpuProfDir: string | undefined;
}

/** Throws a ZodError naming the variable when a setting is malformed. */
export function readSettings(env: Record<string, string | undefined>): Settings {
  const e = Env.parse(env);
  return {
    leases: e.SBX_BENCH_LEASES,
    warmLeases: e.SBX_BENCH_WARM_LEASES,
    calls: e.SBX_BENCH_CALLS,
    throughput: {
      sandboxes: e.SBX_BENCH_THROUGHPUT_SANDBOXES,
      concurrency: e.SBX_BENCH_THROUGHPUT_CONCURRENCY,
      seconds: e.SBX_BENCH_THROUGHPUT_SECONDS,
    },
    stream: { bytes: e.SBX_BENCH_STREAM_BYTES, runs: e.SBX_BENCH_STREAM_RUNS },
    files: { count: e.SBX_BENCH_FILES, bytes: e.SBX_BENCH_FILE_BYTES, baseline: Math.min(e.SBX_BENCH_FILES_BASELINE, e.SBX_BENCH_FILES) },
    upload: { bytes: e.SBX_BENCH_UPLOAD_BYTES, runs: e.SBX_BENCH_UPLOAD_RUNS },
    density: { sandboxes: e.SBX_BENCH_DENSITY, concurrency: e.SBX_BENCH_DENSITY_CONCURRENCY },
    burst: e.SBX_BENCH_BURST,
    cpuCalls: e.SBX_BENCH_CPU_CALLS,
    only: e.SBX_BENCH_ONLY.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    out: e.SBX_BENCH_OUT,
    cpuProfDir: e.SBX_BENCH_CPU_PROF,
  };
}

/** The settings flattened for the results file. */
export function flatSettings(s: Settings): Record<string, number | string | boolean> {
  return {
    leases: s.leases,
    warmLeases: s.warmLeases,
    calls: s.calls,
    throughputSandboxes: s.throughput.sandboxes,
    throughputConcurrency: s.throughput.concurrency,
    throughputSeconds: s.throughput.seconds,
    streamBytes: s.stream.bytes,
    streamRuns: s.stream.runs,
    files: s.files.count,
    fileBytes: s.files.bytes,
    filesBaseline: s.files.baseline,
    uploadBytes: s.upload.bytes,
    uploadRuns: s.upload.runs,
    density: s.density.sandboxes,
    densityConcurrency: s.density.concurrency,
    burst: s.burst,
    cpuCalls: s.cpuCalls,
    only: s.only.join(','),
    cpuProfile: s.cpuProfDir !== undefined,
  };
}
