/** Small timing and summary helpers shared by the figures. */
import type { Stats } from './schema.js';

/** count, p50, p95 and max of `samples`, nearest-rank; all 0 for an empty sample. */
export function summarize(samples: readonly number[]): Stats {
  if (samples.length === 0) return { count: 0, p50: 0, p95: 0, max: 0 };
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = (p: number): number => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
  return { count: sorted.length, p50: rank(50), p95: rank(95), max: sorted.at(-1)! };
}

/** Milliseconds `fn` took (monotonic clock). */
export async function timeMs(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

/** Samples (ms) of two sides timed alternately. */
export interface Alternated {
  ours: number[];
  base: number[];
}

/**
 * Runs `ours(i)` then `baseline(i)` for i in [-warmUps, rounds), each resolving with the
 * milliseconds it measured (untimed work may go around its timeMs); the warm-up rounds (i < 0)
 * are not kept. Alternating puts load from elsewhere on both sides alike.
 */
export async function alternate(
  rounds: number,
  warmUps: number,
  ours: (i: number) => Promise<number>,
  baseline: (i: number) => Promise<number>,
): Promise<Alternated> {
  const out: Alternated = { ours: [], base: [] };
  for (let i = -warmUps; i < rounds; i += 1) {
    const t = await ours(i);
    const b = await baseline(i);
    if (i < 0) continue;
    out.ours.push(t);
    out.base.push(b);
  }
  return out;
}

/** Runs `fn(i)` for i in [0, count) with at most `concurrency` at once; results in order. */
export async function mapLimit<T>(count: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(count);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return out;
}

/**
 * Runs `workers` loops of `op` until `durationMs` has passed; each loop starts its next op when
 * its last ended. Returns every op's latency (ms) and the elapsed time until the last op ended.
 */
export async function closedLoop(
  workers: number,
  durationMs: number,
  op: (worker: number) => Promise<void>,
): Promise<{ latenciesMs: number[]; elapsedMs: number }> {
  const latenciesMs: number[] = [];
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (performance.now() < deadline) latenciesMs.push(await timeMs(() => op(w)));
    }),
  );
  return { latenciesMs, elapsedMs: performance.now() - start };
}

/**
 * Which of `count` items to pick so that `picks` of them are spread evenly over the run (the
 * first, then about every count/picks-th): `true` at the picked indices.
 */
export function spreadPicks(count: number, picks: number): boolean[] {
  const n = Math.max(0, Math.min(picks, count));
  // Item i opens bucket floor(i·n/count); the first item of each of the n buckets is picked.
  return Array.from({ length: count }, (_, i) => (i === 0 ? n > 0 : Math.floor((i * n) / count) > Math.floor(((i - 1) * n) / count)));
}

export const MiB = 1024 * 1024;
