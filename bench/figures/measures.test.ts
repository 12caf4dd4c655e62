import { describe, expect, it } from 'vitest';
import { burstPool } from './burst.js';
import { cpuPerThousand } from './cp-cpu.js';
import { floorOf } from './floor.js';
import { latenciesOf, lineClock } from './stdout-first-byte.js';

describe('stdout first byte: lineClock', () => {
  it('times each line by the chunk that ended it, across chunks that split lines', () => {
    const clock = lineClock();
    // Binary-exact fractions (…125, …25, …375), so the ms compare exactly.
    clock.feed('1796205604.125000\n17962056', 1_796_205_604_160);
    clock.feed(Buffer.from('04.250000\n1796205604.375000\n'), 1_796_205_604_400);
    expect(clock.lines.map((l) => [l.writtenMs, l.arrivedMs])).toEqual([
      [1_796_205_604_125, 1_796_205_604_160],
      [1_796_205_604_250, 1_796_205_604_400],
      [1_796_205_604_375, 1_796_205_604_400],
    ]);
  });

  it('reads a comma as the decimal point (a locale may write one) and refuses a line that is no time', () => {
    const clock = lineClock();
    clock.feed('12,5\n', 13_000);
    expect(clock.lines[0]!.writtenMs).toBe(12_500);
    expect(() => clock.feed('hello\n', 0)).toThrow(/not a timestamp line/);
  });
});

describe('stdout first byte: latenciesOf', () => {
  const line = (writtenMs: number, arrivedMs: number) => ({ writtenMs, arrivedMs });

  it('skips the settling lines and the last, and counts those that arrived while the process ran', () => {
    const lines = [line(0, 90), line(50, 90), line(100, 105), line(150, 400), line(200, 400)];
    // Counted: the lines written at 50, 100 and 150 ms; the process wrote its last at 200 ms.
    expect(latenciesOf(lines, 1)).toEqual({ latenciesMs: [40, 5, 250], whileRunning: 2 });
  });

  it('counts none from a process whose output all came after it ended', () => {
    const lines = [0, 50, 100, 150].map((w) => line(w, 1000));
    expect(latenciesOf(lines, 0)).toEqual({ latenciesMs: [1000, 950, 900], whileRunning: 0 });
  });
});

describe('floorOf', () => {
  it('adds the fork and the PING of each sample', () => {
    expect(floorOf({ forkMs: [1, 1.5], pingMs: [0.1, 0.2] })).toEqual([1.1, 1.7]);
  });
});

describe('cpuPerThousand', () => {
  it('scales the CPU time the calls used to 1,000 calls', () => {
    expect(cpuPerThousand(12_000, 12_500, 250)).toBe(2000);
  });
});

describe('burstPool', () => {
  it('stays empty until claimed, then grows to the burst, at most the 100 a pool allows', () => {
    expect(burstPool(40)).toEqual({ policy: 'bench-burst', min: 0, max: 40 });
    expect(burstPool(500).max).toBe(100);
  });
});
