/**
 * The shape of `bench/results/latest.json` (zod): what `npm run bench` writes and what the
 * smoke test (test/bench-smoke.test.ts) checks it wrote. Times are milliseconds, sizes bytes,
 * rates per second; every figure carries its own unit.
 */
import { z } from 'zod';

/** Nearest-rank summary of a sample. */
export const Stats = z.object({
  count: z.number().int().nonnegative(),
  p50: z.number(),
  p95: z.number(),
  max: z.number(),
});
export type Stats = z.infer<typeof Stats>;

/** One side of a comparison: what was run and what it measured. */
export const Side = z.object({
  /** What was done, e.g. `POST /v1/sandboxes → ready` or `dockerode exec create+start+inspect`. */
  what: z.string(),
  /** Unit of `stats`: `ms` per operation (latency figures), `MiB` (memory). */
  unit: z.string(),
  stats: Stats,
  /** Work per second over the whole run where the figure is a rate (`calls/s`, `MB/s`, `files/s`), else null. */
  rate: z.object({ value: z.number(), unit: z.string() }).nullable(),
});
export type Side = z.infer<typeof Side>;

export const Target = z.object({
  /** The wording, e.g. `p50 ≤ 50 ms`. */
  text: z.string(),
  /** The figure measured against it, e.g. `42.1 ms`. */
  measured: z.string(),
  met: z.boolean(),
});
export type Target = z.infer<typeof Target>;

export const Figure = z.object({
  /** Stable id, also the name `SBX_BENCH_ONLY` selects it by (`lease-cold`, `exec-rtt`, ...). */
  id: z.string(),
  title: z.string(),
  ours: Side,
  baseline: Side.nullable(),
  /**
   * How many times faster sbx is than the baseline (>1: sbx faster, <1: slower): baseline p50 /
   * our p50 for latencies, our rate / baseline rate for rates; null without a baseline.
   */
  speedup: z.number().nullable(),
  speedupBasis: z.enum(['p50', 'rate']).nullable(),
  targets: z.array(Target),
  /** Further measures of the figure (agent RSS, control-plane RSS, ...). */
  extra: z.array(z.object({ what: z.string(), unit: z.string(), stats: Stats })),
  notes: z.array(z.string()),
  /** Wall time the figure took in the run, set-up and clean-up included (ms); absent in results of older runs. */
  durationMs: z.number().nonnegative().optional(),
});
export type Figure = z.infer<typeof Figure>;

export const Results = z.object({
  schema: z.literal('sbx-bench/1'),
  date: z.string().datetime(),
  durationMs: z.number().nonnegative(),
  git: z.object({ commit: z.string(), branch: z.string(), dirty: z.boolean() }),
  machine: z.object({
    hostname: z.string(),
    platform: z.string(),
    release: z.string(),
    arch: z.string(),
    cpuModel: z.string(),
    cpus: z.number().int().positive(),
    totalMemoryBytes: z.number().int().positive(),
    node: z.string(),
    dockerVersion: z.string(),
    /** 1-minute load average at start and end: above the CPU count means other work competed. */
    loadAverage: z.object({ start: z.number(), end: z.number() }),
    /** Containers running on the engine at start that this bench did not make (other users). */
    otherContainersAtStart: z.number().int().nonnegative(),
  }),
  /** The counts and durations the run used (`SBX_BENCH_*`). */
  settings: z.record(z.string(), z.union([z.number(), z.string(), z.boolean()])),
  figures: z.array(Figure),
  /** Figures that threw, with their message: reported, never dropped silently. */
  failures: z.array(z.object({ id: z.string(), message: z.string() })),
});
export type Results = z.infer<typeof Results>;
