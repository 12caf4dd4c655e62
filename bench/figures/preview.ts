/**
 * Port preview: an HTTP GET of a small file (1 KiB) from python3's `http.server` in a sandbox
 * (network `none`), through `/v1/sandboxes/:id/ports/8000/*` (control plane → agent tunnel),
 * against the same server program from the same image in a plain container on the Docker
 * bridge, reached directly at its bridge address, and the floor of the design (preview-floor.ts:
 * the same hops with nothing of sbx in them), reported in a note. Samples alternate, after
 * WARM_UP_GETS of each; one sample = one GET round trip (a new connection each, as http.server
 * speaks HTTP/1.0). The rate is MB/s of a 16 MiB file fetched BIG_RUNS times each way. Targets:
 * ≥ 0.5× the direct round trip (p50) and MB/s.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { BenchContext } from '../context.js';
import { figure, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { summarize, timeMs } from '../stats.js';
import { cpuTimeMsOf } from '../procfs.js';
import { startBareChain, type BareChain } from './preview-floor.js';

const POLICY = 'bench-preview';
const PORT = 8000;
const BIG_BYTES = 16 * 1024 * 1024;
const BIG_RUNS = 8;
/**
 * GETs of each side before the measured ones. A control plane serves previews for hours; its
 * first few hundred requests run code V8 has not optimized yet (its CPU per GET halves over the
 * first 2,000), which is a measure of V8's tier-up, not of the path. The first GETs after the
 * warm-up's start are reported in a note.
 */
const WARM_UP_GETS = 300;
const SETUP = `mkdir -p /tmp/site && head -c 1024 /dev/zero | tr '\\0' a > /tmp/site/small.txt && head -c ${BIG_BYTES} /dev/urandom > /tmp/site/big.bin`;

/** GETs `url` (headers given), returns the body's length and sha256. */
function get(url: string, headers: Record<string, string>): Promise<{ status: number; bytes: number; sha256: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      const hash = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        hash.update(c);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, sha256: hash.digest('hex') }));
      res.on('error', (err) => reject(new Error(`GET ${url}: response ${res.statusCode} after ${bytes} B: ${err.message}`)));
    });
    req.on('error', (err) => reject(new Error(`GET ${url}: ${err.message}`)));
  });
}

async function until(what: string, ok: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await ok().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what} did not answer within 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Puts the bench's preview policy (default, port 8000 previewable); returns its name. */
export async function putPreviewPolicy(ctx: BenchContext): Promise<string> {
  const auth = { authorization: `Bearer ${ctx.plane.apiKey}` };
  const defaults = (await (await fetch(`${ctx.plane.url}/v1/policies/default`, { headers: auth })).json()) as {
    policy: Record<string, unknown>;
  };
  const put = await fetch(`${ctx.plane.url}/v1/policies/${POLICY}`, {
    method: 'PUT',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      ...defaults.policy,
      name: POLICY,
      version: 1,
      description: 'default, with port 8000 previewable (bench)',
      ports: { allowed: [PORT] },
    }),
  });
  if (!put.ok && put.status !== 409) throw new Error(`could not create the ${POLICY} policy: ${await put.text()}`);
  return POLICY;
}

/**
 * Writes the files and starts python3's http.server on 127.0.0.1:8000 in sandbox `id` (a lease
 * of the preview policy); resolves with the preview base URL and its headers once it answers.
 */
export async function startPreviewServer(ctx: BenchContext, id: string): Promise<{ preview: string; auth: Record<string, string> }> {
  const auth = { authorization: `Bearer ${ctx.plane.apiKey}` };
  await ctx.call(id, 'exec', { cmd: SETUP });
  const task = await ctx.client.submitCall(
    id,
    'exec',
    { cmd: `cd /tmp/site && exec python3 -m http.server ${PORT} --bind 127.0.0.1`, background: true, timeoutMs: 3_600_000 },
    { waitSeconds: 30 },
  );
  if (task.status !== 'detached') throw new Error(`the preview server did not start: ${JSON.stringify(task)}`);
  const preview = `${ctx.plane.url}/v1/sandboxes/${id}/ports/${PORT}`;
  await until('the server in the sandbox', async () => (await get(`${preview}/small.txt`, auth)).status === 200);
  return { preview, auth };
}

/** One GET of the 1 KiB file through the preview; throws unless it came whole. */
export async function getSmall(preview: string, auth: Record<string, string>): Promise<void> {
  const r = await get(`${preview}/small.txt`, auth);
  if (r.status !== 200 || r.bytes !== 1024) throw new Error(`preview GET: ${r.status}, ${r.bytes} B`);
}

export async function previewRoundTrip(ctx: BenchContext): Promise<Figure> {
  const count = Math.min(ctx.settings.calls, 200);
  const id = await ctx.lease(await putPreviewPolicy(ctx));
  const direct = await ctx.docker.createContainer({
    Image: ctx.image,
    Entrypoint: ['/bin/sh', '-c', `${SETUP} && cd /tmp/site && exec python3 -m http.server ${PORT} --bind 0.0.0.0`],
    Labels: ctx.labels,
    User: '1000:1000',
    HostConfig: { NetworkMode: 'bridge' },
  });
  let bare: BareChain | null = null;
  const bareSamples: number[] = [];
  const ours: number[] = [];
  const base: number[] = [];
  const oursFirst: number[] = [];
  const baseFirst: number[] = [];
  const oursBig: number[] = [];
  /** CPU ms over the measured loop: the control plane and the agent, the bare chain's proxy and relay. */
  const cpuMs = { plane: 0, agent: 0, proxy: 0, relay: 0 };
  let agentPid = 0;
  const cpuPids = (): Array<[keyof typeof cpuMs, number]> => [
    ['plane', ctx.plane.pid],
    ['agent', agentPid],
    ['proxy', bare!.proxyPid],
    ['relay', bare!.relayPid],
  ];
  const baseBig: number[] = [];
  try {
    await direct.start();
    const address = (await direct.inspect()).NetworkSettings.Networks['bridge']?.IPAddress ?? '';
    if (!address) throw new Error('the direct container has no bridge address');
    const { preview, auth } = await startPreviewServer(ctx, id);
    agentPid = await ctx.agentPidOf(id);
    const plain = `http://${address}:${PORT}`;
    await until('the direct server', async () => (await get(`${plain}/small.txt`, {})).status === 200);
    bare = await startBareChain(ctx, SETUP, PORT);
    const chain = bare.url;
    await until('the bare chain', async () => (await get(`${chain}/small.txt`, {})).status === 200);
    // A smoke run (a handful of GETs) warms up no more than three times what it measures.
    const warmUp = Math.min(WARM_UP_GETS, 3 * count);
    for (let i = -warmUp; i < count; i += 1) {
      // The direct GETs do not reach the control plane: its CPU over the loop is the previews'
      // (and the agent's, the bare chain's its own).
      if (i === 0) for (const [k, pid] of cpuPids()) cpuMs[k] = -(await cpuTimeMsOf(pid));
      const t = await timeMs(() => getSmall(preview, auth));
      const b = await timeMs(async () => {
        const r = await get(`${plain}/small.txt`, {});
        if (r.status !== 200 || r.bytes !== 1024) throw new Error(`direct GET: ${r.status}, ${r.bytes} B`);
      });
      const f = await timeMs(async () => {
        const r = await get(`${chain}/small.txt`, {});
        if (r.status !== 200 || r.bytes !== 1024) throw new Error(`bare chain GET: ${r.status}, ${r.bytes} B`);
      });
      if (i >= 0) bareSamples.push(f);
      if (i < -warmUp + count) {
        oursFirst.push(t);
        baseFirst.push(b);
      }
      if (i < 0) continue;
      ours.push(t);
      base.push(b);
    }
    for (const [k, pid] of cpuPids()) cpuMs[k] += await cpuTimeMsOf(pid);
    for (let i = 0; i < BIG_RUNS; i += 1) {
      oursBig.push(
        await timeMs(async () => {
          if ((await get(`${preview}/big.bin`, auth)).bytes !== BIG_BYTES) throw new Error('preview big.bin cut short');
        }),
      );
      baseBig.push(
        await timeMs(async () => {
          if ((await get(`${plain}/big.bin`, {})).bytes !== BIG_BYTES) throw new Error('direct big.bin cut short');
        }),
      );
    }
  } finally {
    await bare?.stop();
    await direct.remove({ force: true }).catch(() => undefined);
    await ctx.release(id);
  }
  const mbps = (s: number[]): { value: number; unit: string } => ({
    value: (BIG_BYTES * s.length) / 1e6 / (s.reduce((a, b) => a + b, 0) / 1000),
    unit: 'MB/s',
  });
  const oursSide = side(`GET 1 KiB via /v1/sandboxes/:id/ports/${PORT}/ (network none)`, ours, { rate: mbps(oursBig) });
  const baseSide = side('GET 1 KiB direct to the container on the bridge', base, { rate: mbps(baseBig) });
  const throughputRatio = (oursSide.rate?.value ?? 0) / (baseSide.rate?.value || NaN);
  return figure({
    id: 'preview',
    title: `port preview, python3 http.server: ${count} GETs of 1 KiB, ${BIG_RUNS} of ${BIG_BYTES / 1024 / 1024} MiB`,
    ours: oursSide,
    baseline: baseSide,
    basis: 'p50',
    targets: (s) => [
      target('round trip ≥ 0.5× direct', s ?? NaN, '>=', 0.5, times),
      target('MB/s ≥ 0.5× direct', throughputRatio, '>=', 0.5, times),
    ],
    notes: [
      `floor of the design (preview-floor.ts: a bare Node proxy → Unix socket → a bare Node relay in a network-none container → the same server), sampled between the two: p50 ${summarize(bareSamples).p50.toFixed(2)} ms, ${(summarize(base).p50 / summarize(bareSamples).p50).toFixed(2)}× direct; the preview's p50 is ${(summarize(bareSamples).p50 / summarize(ours).p50).toFixed(2)}× the floor's speed`,
      `the first ${oursFirst.length} GETs of each side, from the first preview request the control plane served: p50 ${summarize(oursFirst).p50.toFixed(2)} ms through the preview, ${summarize(baseFirst).p50.toFixed(2)} ms direct (${(summarize(baseFirst).p50 / summarize(oursFirst).p50).toFixed(2)}×)`,
      `CPU per GET (/proc, user + system): control plane ${(cpuMs.plane / count).toFixed(2)} ms against the bare proxy's ${(cpuMs.proxy / count).toFixed(2)} ms, agent ${(cpuMs.agent / count).toFixed(2)} ms against the bare relay's ${(cpuMs.relay / count).toFixed(2)} ms; sbx's two include the server's access-log line, an output event of its background call (the bare chain's server writes to the container log)`,
      'rates are MB/s of the 16 MiB file; each preview request takes one of the agent’s pooled tunnel connections (the first: control message → agent → Unix socket) and opens a loopback connection in the sandbox',
    ],
  });
}
