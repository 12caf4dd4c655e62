/** Builders for a `Figure` of the results: sides, speed-up and targets, so figures stay short. */
import type { Figure, Side, Stats, Target } from './schema.js';
import { summarize } from './stats.js';

/** A side measured as per-operation samples (`unit`, usually ms), with an optional overall rate. */
export function side(
  what: string,
  samples: readonly number[],
  options: { unit?: string; rate?: { value: number; unit: string } } = {},
): Side {
  return { what, unit: options.unit ?? 'ms', stats: summarize(samples), rate: options.rate ?? null };
}

/**
 * Work per second over samples (ms each) that each did `perSample` units of work: the total work
 * over the total time, so a slow sample weighs as long as it took. NaN for no samples.
 */
export function rateOf(perSample: number, samplesMs: readonly number[], unit: string): { value: number; unit: string } {
  const totalMs = samplesMs.reduce((a, b) => a + b, 0);
  return { value: samplesMs.length === 0 ? NaN : (perSample * samplesMs.length * 1000) / totalMs, unit };
}

/** baseline p50 / our p50 (latency), or our rate / baseline rate. */
export function speedup(ours: Side, baseline: Side, basis: 'p50' | 'rate'): number {
  if (basis === 'rate') return (ours.rate?.value ?? 0) / (baseline.rate?.value || NaN);
  return baseline.stats.p50 / (ours.stats.p50 || NaN);
}

/** A target: `value` against `limit` in the direction `op`. */
export function target(text: string, value: number, op: '<=' | '>=', limit: number, format: (v: number) => string): Target {
  return { text, measured: format(value), met: Number.isFinite(value) && (op === '<=' ? value <= limit : value >= limit) };
}

export const ms = (v: number): string => `${v.toFixed(1)} ms`;
export const times = (v: number): string => `${v.toFixed(2)}×`;
export const perSecond =
  (unit: string) =>
  (v: number): string =>
    `${v.toFixed(1)} ${unit}`;
export const mib = (v: number): string => `${v.toFixed(1)} MiB`;

export function figure(f: {
  id: string;
  title: string;
  ours: Side;
  baseline?: Side;
  basis?: 'p50' | 'rate';
  targets: (speedup: number | null) => Target[];
  extra?: Array<{ what: string; unit: string; stats: Stats }>;
  notes?: string[];
}): Figure {
  const s = f.baseline && f.basis ? speedup(f.ours, f.baseline, f.basis) : null;
  return {
    id: f.id,
    title: f.title,
    ours: f.ours,
    baseline: f.baseline ?? null,
    speedup: s === null || !Number.isFinite(s) ? null : s,
    speedupBasis: f.baseline && f.basis ? f.basis : null,
    targets: f.targets(s),
    extra: f.extra ?? [],
    notes: f.notes ?? [],
  };
}
