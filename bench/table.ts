/** The results as one Markdown table (printed by `npm run bench`, pasted into the README). */
import type { Figure, Results, Side, Stats } from './schema.js';

const num = (v: number): string => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));
const stats = (s: Stats, unit: string): string => `${num(s.p50)} / ${num(s.p95)} / ${num(s.max)} ${unit}`;
const sideCell = (s: Side | null): string =>
  s ? `${stats(s.stats, s.unit)}${s.rate ? `; **${num(s.rate.value)} ${s.rate.unit}**` : ''}` : '—';

/** The table rows of one figure (its own, then one per extra measure). */
export function rows(f: Figure): string[] {
  const speedup = f.speedup === null ? '—' : `${num(f.speedup)}× (${f.speedupBasis})`;
  const targets =
    f.targets.map((t) => `${t.met ? '✅ met' : '❌ **MISSED**'}: ${t.text} — ${t.measured}`).join('<br>') || 'reported (no target)';
  const out = [`| ${f.title} | ${f.ours.stats.count} | ${sideCell(f.ours)} | ${sideCell(f.baseline)} | ${speedup} | ${targets} |`];
  for (const e of f.extra) out.push(`| ↳ ${e.what} | ${e.stats.count} | ${stats(e.stats, e.unit)} | | | |`);
  for (const note of f.notes) out.push(`| ↳ *${note.replace(/\|/g, '\\|')}* | | | | | |`);
  return out;
}

export function renderTable(r: Results): string {
  const m = r.machine;
  const head = [
    `sbx bench ${r.date} · ${r.git.commit.slice(0, 12)}${r.git.dirty ? ' (dirty)' : ''} on ${r.git.branch} · ${m.cpus}× ${m.cpuModel}, ${(m.totalMemoryBytes / 2 ** 30).toFixed(0)} GiB, ${m.platform} ${m.release}, node ${m.node}, docker ${m.dockerVersion}`,
    `load average ${m.loadAverage.start.toFixed(2)} at start, ${m.loadAverage.end.toFixed(2)} at end; ${m.otherContainersAtStart} other containers running at start · ${(r.durationMs / 1000).toFixed(0)} s`,
    '',
    '| figure | n | sbx p50 / p95 / max; rate | baseline (dockerode) p50 / p95 / max; rate | speed-up vs baseline | target |',
    '|---|---|---|---|---|---|',
  ];
  const failures = r.failures.map((f) => `| ${f.id} | — | ❌ **FAILED**: ${f.message.replace(/\|/g, '\\|').slice(0, 200)} | | | |`);
  return [...head, ...r.figures.flatMap(rows), ...failures, '', timeLine(r)].join('\n');
}

/** Where the run's time went: each figure's wall time (set-up and clean-up included), in run order. */
export function timeLine(r: Results): string {
  const timed = r.figures.filter((f) => f.durationMs !== undefined);
  const sum = timed.reduce((a, f) => a + f.durationMs!, 0);
  return `time per figure (s): ${timed.map((f) => `${f.id} ${(f.durationMs! / 1000).toFixed(0)}`).join(', ')}; figures ${(sum / 1000).toFixed(0)} of ${(r.durationMs / 1000).toFixed(0)} s`;
}
