/**
 * stdout streaming: `exec head -c N /dev/zero` (default 200 MB), received the way a client gets
 * all of it — the call's events over SSE until `call.finished` (live output up to the kept
 * limit; the `artifact` event names the artifact that holds the whole stream, the `receipt`
 * event its digest), then that artifact (the SDK's `artifact` reader), read and sha256-checked
 * against the receipt — against dockerode exec attach reading (and hashing) the same bytes. The
 * call record is not read again: the events carried all of it, and its kept stdout of 4 MiB of
 * NUL bytes is 25 MB of JSON (each NUL is `\u0000`). The agent's resident memory is sampled
 * from the host every 100 ms meanwhile.
 */
import { createHash } from 'node:crypto';
import type { BenchContext } from '../context.js';
import { dockerExecOk } from '../baseline.js';
import { figure, mib, rateOf, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { MiB, summarize, timeMs } from '../stats.js';

export async function stdoutStream(ctx: BenchContext): Promise<Figure> {
  const { bytes, runs } = ctx.settings.stream;
  const id = await ctx.lease();
  const container = ctx.container(id);
  const cmd = ['head', '-c', String(bytes), '/dev/zero'];
  const ours: number[] = [];
  const base: number[] = [];
  const peakRss: number[] = [];
  const growth: number[] = [];
  let eventBytes = 0;
  try {
    for (let r = 0; r < runs; r += 1) {
      const before = await ctx.agentMemory(id);
      let peak = before.rssBytes;
      const sampler = setInterval(
        () =>
          void ctx.agentMemory(id).then(
            (m) => (peak = Math.max(peak, m.rssBytes)),
            () => undefined,
          ),
        100,
      );
      try {
        ours.push(
          await timeMs(async () => {
            const pending = await ctx.client.submitCall(id, 'exec', { argv: cmd });
            eventBytes = 0;
            // What the client needs besides the live output comes in the same event stream: the
            // artifact's id and digest, the receipt's digest of the whole stream, the status.
            let artifactId: string | undefined;
            let expected: string | undefined;
            let status: string | undefined;
            for await (const e of ctx.client.events(id, pending.callId)) {
              if (e.type === 'output' && 'dataBase64' in e) eventBytes += Buffer.byteLength(String(e.dataBase64), 'base64');
              else if (e.type === 'artifact' && e.name === 'stdout.log') artifactId = e.artifactId;
              else if (e.type === 'receipt') expected = e.receipt.outputs?.stdout?.sha256;
              else if (e.type === 'call.finished') status = e.status;
            }
            if (status !== 'succeeded') throw new Error(`stream exec ${status ?? 'unfinished'}`);
            if (!artifactId || !expected) throw new Error(`no artifact (or no receipt digest) for ${bytes} bytes of stdout`);
            const hash = createHash('sha256');
            let got = 0;
            for await (const chunk of await ctx.client.artifact(id, artifactId)) {
              hash.update(chunk);
              got += chunk.length;
            }
            if (got !== bytes || hash.digest('hex') !== expected)
              throw new Error(`artifact has ${got} bytes / another sha256 than the receipt`);
          }),
        );
      } finally {
        clearInterval(sampler);
      }
      const after = await ctx.agentMemory(id);
      peakRss.push(Math.max(peak, after.rssBytes) / MiB);
      growth.push((Math.max(peak, after.rssBytes) - before.rssBytes) / MiB);
      base.push(
        await timeMs(async () => {
          const hash = createHash('sha256');
          const out = await dockerExecOk(ctx.docker, container, cmd, { onStdout: (c) => hash.update(c) });
          hash.digest();
          if (out.stdoutBytes !== bytes) throw new Error(`baseline read ${out.stdoutBytes} bytes`);
        }),
      );
    }
  } finally {
    await ctx.release(id);
  }
  const mb = bytes / 1e6;
  const grew = summarize(growth);
  return figure({
    id: 'stdout-stream',
    title: `stdout streaming, ${mb} MB`,
    ours: side('exec → SSE events + artifact (sha256-checked)', ours, { rate: rateOf(mb, ours, 'MB/s') }),
    baseline: side('dockerode exec attach, same bytes hashed', base, { rate: rateOf(mb, base, 'MB/s') }),
    basis: 'rate',
    targets: (s) => [
      target('≥ 0.8× baseline rate', s ?? NaN, '>=', 0.8, times),
      target('agent RSS growth ≤ 32 MiB', grew.max, '<=', 32, mib),
    ],
    extra: [
      { what: 'agent peak RSS during the run', unit: 'MiB', stats: summarize(peakRss) },
      { what: 'agent RSS growth over the run', unit: 'MiB', stats: grew },
    ],
    notes: [`live output events carried ${(eventBytes / MiB).toFixed(1)} MiB (the kept limit); the artifact carries all ${mb} MB`],
  });
}
