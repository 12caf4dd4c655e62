/**
 * stdout first-byte latency: how long a byte written by a process that still runs takes to reach
 * the client. The process (bash, as the tool user) writes a line holding the time it was written
 * (`$EPOCHREALTIME`, the host's clock: a container shares the kernel's) every 50 ms; the client
 * notes when each line arrives and subtracts. Ours: the call's SSE events (`output`), opened
 * right after the call was submitted. Baseline: dockerode exec attach (`docker exec`) of the same
 * script in the same container. The first lines of each run (written while the stream was still
 * being set up) are not counted, nor the last (written as the process ended). Runs alternate.
 */
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, ms, side, target } from '../figure.js';
import type { Figure } from '../schema.js';

/** Lines written before the streams are surely open (250 ms at one line per 50 ms): not counted. */
const SETTLE_LINES = 5;
const INTERVAL_SECONDS = 0.05;

/** Wall-clock time now, ms since the epoch, with the sub-millisecond precision of the monotonic clock. */
const nowMs = (): number => performance.timeOrigin + performance.now();

/** One line's times: written (as the line says) and arrived (as the client saw), ms since the epoch. */
export interface LineTimes {
  writtenMs: number;
  arrivedMs: number;
}

/**
 * Collects timestamped lines (`<seconds>.<micro>` per line, as bash's `$EPOCHREALTIME` gives)
 * from chunks that may split a line anywhere; a line's arrival is that of the chunk that ended it.
 */
export function lineClock(): { feed: (chunk: Buffer | string, arrivedMs: number) => void; lines: LineTimes[] } {
  const lines: LineTimes[] = [];
  let partial = '';
  return {
    lines,
    feed(chunk, arrivedMs) {
      const parts = (partial + chunk.toString()).split('\n');
      partial = parts.pop() ?? '';
      for (const line of parts) {
        const seconds = Number(line.trim().replace(',', '.'));
        if (line.trim() === '' || !Number.isFinite(seconds)) throw new Error(`not a timestamp line: ${JSON.stringify(line)}`);
        lines.push({ writtenMs: seconds * 1000, arrivedMs });
      }
    },
  };
}

/**
 * The latencies (ms) of the lines that count: not the first `settle`, not the last (the process
 * ended there); and how many of those arrived before the last line was written (the process ran).
 */
export function latenciesOf(lines: readonly LineTimes[], settle: number): { latenciesMs: number[]; whileRunning: number } {
  const endMs = lines.at(-1)?.writtenMs ?? Infinity;
  const counted = lines.slice(settle, -1);
  return {
    latenciesMs: counted.map((l) => l.arrivedMs - l.writtenMs),
    whileRunning: counted.filter((l) => l.arrivedMs < endMs).length,
  };
}

export async function stdoutFirstByte(ctx: BenchContext): Promise<Figure> {
  const lineCount = Math.max(SETTLE_LINES + 3, Math.min(40, ctx.settings.calls));
  const runs = ctx.settings.calls >= 40 ? 2 : 1;
  const script = `for i in $(seq ${lineCount}); do echo $EPOCHREALTIME; sleep ${INTERVAL_SECONDS}; done; echo $EPOCHREALTIME`;
  const id = await ctx.lease();
  const ours: number[] = [];
  const base: number[] = [];
  let oursRunning = 0;
  let baseRunning = 0;
  try {
    for (let r = 0; r < runs; r += 1) {
      const mine = lineClock();
      const pending = await ctx.client.submitCall(id, 'exec', { argv: ['bash', '-c', script] });
      for await (const e of ctx.client.events(id, pending.callId)) {
        if (e.type === 'output' && e.stream === 'stdout') mine.feed(Buffer.from(e.dataBase64, 'base64'), nowMs());
        if (e.type === 'call.finished' && e.status !== 'succeeded') throw new Error(`first-byte exec ${e.status}`);
      }
      const theirs = lineClock();
      await dockerExecOk(ctx.docker, ctx.container(id), ['bash', '-c', script], { onStdout: (c) => theirs.feed(c, nowMs()) });
      for (const clock of [mine, theirs])
        if (clock.lines.length !== lineCount + 1) throw new Error(`${clock.lines.length} lines arrived of ${lineCount + 1}`);
      const o = latenciesOf(mine.lines, SETTLE_LINES);
      const b = latenciesOf(theirs.lines, SETTLE_LINES);
      ours.push(...o.latenciesMs);
      base.push(...b.latenciesMs);
      oursRunning += o.whileRunning;
      baseRunning += b.whileRunning;
    }
  } finally {
    await ctx.release(id);
  }
  const o = side('exec → SSE output event, line written → line received', ours);
  return figure({
    id: 'stdout-first-byte',
    title: 'stdout first byte of a running process (written → client)',
    ours: o,
    baseline: side('dockerode exec attach, line written → line received', base),
    basis: 'p50',
    targets: () => [target('p50 ≤ 50 ms while the process runs', o.stats.p50, '<=', 50, ms)],
    notes: [
      `a line every ${INTERVAL_SECONDS * 1000} ms, ${lineCount} per run, ${runs} run(s) a side; lines that reached the client while the process still ran: ours ${oursRunning} of ${ours.length}, baseline ${baseRunning} of ${base.length}`,
    ],
  });
}
