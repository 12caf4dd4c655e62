/**
 * HTTPS through the egress proxy (issue 16's benchmark): a GET from inside a sandbox with
 * credential injection (the proxy ends TLS with the lease CA, injects a header, sends the request
 * on over new TLS), through a plain CONNECT tunnel of the same proxy, and directly from a sandbox
 * with network `open` (its own bridge network, no proxy), to one HTTPS server on this machine
 * (bench/egress-upstream.ts). Each request is a new `curl` process with a new TLS connection,
 * timed by curl itself (`time_total`) inside the sandbox, so sbx's call path is not in the
 * figure; the sides run in alternating batches (calls/2 requests each, at most 5 rounds). Then MB/s of a 64 MiB body, the same way.
 * Reported as ratios, no target (the issue asks for the numbers).
 */
import { CREDENTIAL_TRUST } from '../../contract/secrets.js';
import type { BenchContext } from '../context.js';
import { BENCH_HOSTS, BULK_BYTES } from '../egress-upstream.js';
import { figure, side } from '../figure.js';
import type { Figure } from '../schema.js';
import { summarize } from '../stats.js';

const OPEN_POLICY = 'bench-egress-open';
const PROXY_POLICY = 'bench-egress-proxy';
const SECRET = 'BENCH_EGRESS_TOKEN';
/** Alternating rounds (at most; fewer when `SBX_BENCH_CALLS` is smaller); each runs calls/rounds requests of every side, and one bulk download each. */
const MAX_ROUNDS = 5;
const CA_PATH = '/workspace/bench-ca.pem';
/** The lease CA in the sandbox. */
const LEASE_CA_PATH = `${CREDENTIAL_TRUST.dir}/${CREDENTIAL_TRUST.files.ca}`;

/** `injectBundle`: intercepted, trusting curl's default (the system bundle, which holds the lease CA). */
type SideName = 'inject' | 'injectBundle' | 'tunnel' | 'direct';
const SIDES: readonly SideName[] = ['inject', 'injectBundle', 'tunnel', 'direct'];

async function putPolicies(ctx: BenchContext, port: number): Promise<void> {
  const { policy: defaults } = (await ctx.client.json('GET', '/v1/policies/default')) as { policy: Record<string, unknown> };
  const base = { ...defaults, version: 1, description: 'bench: egress-https' };
  await ctx.client.json('PUT', `/v1/policies/${OPEN_POLICY}`, { ...base, name: OPEN_POLICY, network: { mode: 'open' } });
  await ctx.client.json('PUT', `/v1/policies/${PROXY_POLICY}`, {
    ...base,
    name: PROXY_POLICY,
    network: {
      mode: 'allowlist',
      // The server is on the host's loopback, which a host rule alone never reaches.
      allow: [
        { host: BENCH_HOSTS.tunnel, ports: [port] },
        { host: BENCH_HOSTS.inject, ports: [port] },
        { cidr: '127.0.0.1/32', ports: [port] },
      ],
    },
    secrets: {
      allowed: [SECRET],
      inject: [{ secret: SECRET, hosts: [BENCH_HOSTS.inject], in: 'header', name: 'Authorization', template: 'Bearer {value}' }],
    },
  });
}

export async function egressHttps(ctx: BenchContext): Promise<Figure> {
  const upstream = ctx.carried.egressUpstream;
  if (!upstream) throw new Error('egress-https needs the bench upstream, started with the plane (bench/run.ts)');
  const { port } = upstream;
  await putPolicies(ctx, port);
  await ctx.client.putSecret(SECRET, 'bench-secret-value');
  const open = await ctx.lease(OPEN_POLICY);
  const proxied = await ctx.lease(PROXY_POLICY, undefined, { secrets: [{ name: SECRET }] });
  try {
    for (const id of [open, proxied]) await ctx.call(id, 'write_file', { path: CA_PATH, content: upstream.caPem });
    const gateway = (await ctx.call(open, 'exec', { cmd: "ip -4 route | awk '/^default/ {print $3}'" })).stdout.trim();
    if (!/^\d+\.\d+\.\d+\.\d+$/.test(gateway)) throw new Error(`no default gateway in the open sandbox: ${JSON.stringify(gateway)}`);
    const curlOf: Record<SideName, { id: string; url: (path: string) => string; options: string }> = {
      // The lease CA alone, as the other sides trust their one CA: loading the whole system
      // bundle (which holds it too) costs curl more than the proxy's work.
      inject: { id: proxied, url: (p) => `https://${BENCH_HOSTS.inject}:${port}${p}`, options: `--cacert ${LEASE_CA_PATH}` },
      injectBundle: { id: proxied, url: (p) => `https://${BENCH_HOSTS.inject}:${port}${p}`, options: '' },
      tunnel: { id: proxied, url: (p) => `https://${BENCH_HOSTS.tunnel}:${port}${p}`, options: `--cacert ${CA_PATH}` },
      direct: {
        id: open,
        url: (p) => `https://${BENCH_HOSTS.direct}:${port}${p}`,
        options: `--cacert ${CA_PATH} --resolve ${BENCH_HOSTS.direct}:${port}:${gateway}`,
      },
    };
    const latencyMs: Record<SideName, number[]> = { inject: [], injectBundle: [], tunnel: [], direct: [] };
    const mbPerSecond: Record<SideName, number[]> = { inject: [], injectBundle: [], tunnel: [], direct: [] };
    const curl = async (name: SideName, cmd: string): Promise<number[]> => {
      const out = (await ctx.call(curlOf[name].id, 'exec', { cmd }, 300)).stdout;
      return out
        .trim()
        .split('\n')
        .map((line) => Number(line));
    };
    // A warm-up request of each side: DNS answers cached, the lease CA's certificate for the host issued.
    for (const name of SIDES)
      await curl(name, `curl -sS -o /dev/null -w '%{time_total}\\n' ${curlOf[name].options} ${curlOf[name].url('/small')}`);
    const rounds = Math.min(MAX_ROUNDS, ctx.settings.calls);
    const batch = Math.ceil(ctx.settings.calls / 2 / rounds);
    for (let round = 0; round < rounds; round += 1) {
      const order = SIDES.map((_, i) => SIDES[(i + round) % SIDES.length]!);
      for (const name of order) {
        const { options, url } = curlOf[name];
        const seconds = await curl(
          name,
          `for i in $(seq ${batch}); do curl -sS --fail -o /dev/null -w '%{time_total}\\n' ${options} ${url('/small')}; done`,
        );
        latencyMs[name].push(...seconds.map((s) => s * 1000));
        const [bytesPerSecond] = await curl(name, `curl -sS --fail -o /dev/null -w '%{speed_download}\\n' ${options} ${url('/bulk')}`);
        mbPerSecond[name].push(bytesPerSecond! / 1e6);
      }
    }
    const p50 = (xs: number[]): number => summarize(xs).p50;
    const rate = (name: SideName): { value: number; unit: string } => ({ value: p50(mbPerSecond[name]), unit: 'MB/s' });
    const ratio = (a: number, b: number): string => (a / b).toFixed(2);
    return figure({
      id: 'egress-https',
      title: 'HTTPS GET from a sandbox: credential injection vs direct on a bridge network',
      ours: side('intercepted + injected (lease CA, header template), new TLS per request', latencyMs.inject, { rate: rate('inject') }),
      baseline: side('direct, network open (own bridge), no proxy', latencyMs.direct, { rate: rate('direct') }),
      basis: 'p50',
      targets: () => [],
      extra: [
        { what: 'CONNECT tunnel through the same proxy', unit: 'ms', stats: summarize(latencyMs.tunnel) },
        { what: "intercepted, curl's default trust (system bundle + lease CA)", unit: 'ms', stats: summarize(latencyMs.injectBundle) },
        { what: `${BULK_BYTES / 1024 / 1024} MiB body, intercepted (MB/s)`, unit: 'MB/s', stats: summarize(mbPerSecond.inject) },
        { what: `${BULK_BYTES / 1024 / 1024} MiB body, CONNECT tunnel (MB/s)`, unit: 'MB/s', stats: summarize(mbPerSecond.tunnel) },
        { what: `${BULK_BYTES / 1024 / 1024} MiB body, direct (MB/s)`, unit: 'MB/s', stats: summarize(mbPerSecond.direct) },
      ],
      notes: [
        `latency p50 ratios (lower is faster): intercepted/direct ${ratio(p50(latencyMs.inject), p50(latencyMs.direct))}×, tunnel/direct ${ratio(p50(latencyMs.tunnel), p50(latencyMs.direct))}×, intercepted/tunnel ${ratio(p50(latencyMs.inject), p50(latencyMs.tunnel))}×`,
        `MB/s p50 ratios (higher is faster): intercepted/direct ${ratio(p50(mbPerSecond.inject), p50(mbPerSecond.direct))}×, tunnel/direct ${ratio(p50(mbPerSecond.tunnel), p50(mbPerSecond.direct))}×`,
        'time_total of a new curl process each: TCP and TLS handshakes included (two TLS handshakes when intercepted). Each side trusts one CA file; curl loading the whole system bundle instead is its own row (its cost is curl reading the bundle, the same for any destination).',
      ],
    });
  } finally {
    await ctx.release(open).catch(() => undefined);
    await ctx.release(proxied).catch(() => undefined);
  }
}
