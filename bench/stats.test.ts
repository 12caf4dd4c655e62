import { describe, expect, it } from 'vitest';
import { figure, rateOf, side, speedup, target, times } from './figure.js';
import { cpuTicksOfStat } from './procfs.js';
import { readSettings } from './settings.js';
import { spreadPicks, summarize } from './stats.js';
import { timeLine } from './table.js';
import type { Results } from './schema.js';

describe('summarize', () => {
  it('gives nearest-rank p50, p95 and max of an unsorted sample', () => {
    const samples = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1
    expect(summarize(samples)).toEqual({ count: 100, p50: 50, p95: 95, max: 100 });
    expect(summarize([7])).toEqual({ count: 1, p50: 7, p95: 7, max: 7 });
    expect(summarize([])).toEqual({ count: 0, p50: 0, p95: 0, max: 0 });
  });
});

describe('rateOf', () => {
  it('is the total work over the total time, so a slow sample weighs as long as it took', () => {
    // 100 MB in 100 ms and in 300 ms: 200 MB in 0.4 s, not the mean of 1000 and 333 MB/s.
    expect(rateOf(100, [100, 300], 'MB/s')).toEqual({ value: 500, unit: 'MB/s' });
    expect(rateOf(1, [], 'files/s').value).toBeNaN();
  });
});

describe('speedup and targets', () => {
  const fast = side('ours', [10, 10, 10], { rate: { value: 300, unit: 'calls/s' } });
  const slow = side('base', [40, 40, 40], { rate: { value: 30, unit: 'calls/s' } });

  it('counts how many times better than the baseline, for latencies and for rates', () => {
    expect(speedup(fast, slow, 'p50')).toBe(4);
    expect(speedup(fast, slow, 'rate')).toBe(10);
    expect(speedup(slow, fast, 'p50')).toBe(0.25);
  });

  it('meets a target only on the right side of its limit, and never with a NaN', () => {
    expect(target('≥ 10×', 10, '>=', 10, times).met).toBe(true);
    expect(target('≥ 10×', 9.99, '>=', 10, times).met).toBe(false);
    expect(target('≤ 3× floor', 3.2, '<=', 3, times)).toEqual({ text: '≤ 3× floor', measured: '3.20×', met: false });
    expect(target('≥ 0.8×', NaN, '>=', 0.8, times).met).toBe(false);
  });

  it('builds a figure whose speed-up is null without a baseline and whose targets see it', () => {
    const withBase = figure({
      id: 'x',
      title: 'x',
      ours: fast,
      baseline: slow,
      basis: 'rate',
      targets: (s) => [target('≥ 10×', s ?? NaN, '>=', 10, times)],
    });
    expect(withBase.speedup).toBe(10);
    expect(withBase.targets[0]!.met).toBe(true);
    const alone = figure({ id: 'y', title: 'y', ours: fast, targets: () => [] });
    expect(alone.speedup).toBeNull();
    expect(alone.speedupBasis).toBeNull();
  });
});

describe('spreadPicks', () => {
  it('picks exactly the asked number, the first of each even stretch', () => {
    const picks = spreadPicks(1000, 250);
    expect(picks.filter(Boolean)).toHaveLength(250);
    expect(picks.slice(0, 9)).toEqual([true, false, false, false, true, false, false, false, true]);
    expect(spreadPicks(10, 3).flatMap((p, i) => (p ? [i] : []))).toEqual([0, 4, 7]);
  });

  it('picks all when asked for as many or more, none when asked for none', () => {
    expect(spreadPicks(3, 7)).toEqual([true, true, true]);
    expect(spreadPicks(4, 0)).toEqual([false, false, false, false]);
  });
});

describe('cpuTicksOfStat', () => {
  it('adds utime and stime, also when the command name holds spaces and parentheses', () => {
    const rest = 'S 1 1 1 0 -1 4194560 500 0 0 0 1234 567 0 0 20 0 11 0 100 1000 200 18446744073709551615';
    expect(cpuTicksOfStat(`4242 (node) ${rest}`)).toBe(1801);
    expect(cpuTicksOfStat(`4242 (my (odd) name) ${rest}`)).toBe(1801);
  });

  it('throws on text that is not a stat line', () => {
    expect(() => cpuTicksOfStat('garbage')).toThrow(/not a \/proc/);
  });
});

describe('settings', () => {
  it('defaults the new counts and keeps the baseline files within the files', () => {
    const s = readSettings({});
    expect(s.burst).toBe(100);
    expect(s.cpuCalls).toBe(1000);
    expect(s.files).toEqual({ count: 1000, bytes: 4096, baseline: 100 });
    expect(readSettings({ SBX_BENCH_FILES: '10' }).files.baseline).toBe(10);
  });
});

describe('timeLine', () => {
  it('lists each figure’s wall time and their sum against the run’s', () => {
    const f = (id: string, durationMs?: number) => ({
      ...figure({ id, title: id, ours: side('x', [1]), targets: () => [] }),
      ...(durationMs === undefined ? {} : { durationMs }),
    });
    const r = { durationMs: 100_000, figures: [f('a', 40_000), f('b', 20_400), f('old')] } as unknown as Results;
    expect(timeLine(r)).toBe('time per figure (s): a 40, b 20; figures 60 of 100 s');
  });
});
