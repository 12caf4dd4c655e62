/**
 * The HTTPS server the `egress-https` figure fetches from, on this machine only: a CA of the
 * bench's own (made with the `openssl` CLI), an HTTPS server on every interface of the host (a
 * sandbox with network `open` reaches it at its network's gateway; the egress proxy, on the
 * host, at 127.0.0.1) answering `/small` with 2 bytes and `/bulk` with BULK_BYTES, and a DNS
 * server on 127.0.0.1 naming the proxy's destinations 127.0.0.1 (the plane's
 * `SBX_EGRESS_DNS_SERVERS`; `SBX_EGRESS_UPSTREAM_CA` is the CA file).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import dns2 from 'dns2';

const run = promisify(execFile);

/** The names the figure asks for: one tunnelled through the proxy, one the proxy intercepts, one dialled directly. */
export const BENCH_HOSTS = { tunnel: 'tunnel.bench.test', inject: 'inject.bench.test', direct: 'direct.bench.test' } as const;
/** Bytes of `/bulk`. */
export const BULK_BYTES = 64 * 1024 * 1024;

export interface BenchUpstream {
  port: number;
  /** The CA certificate (PEM) sandboxes trust for the tunnelled and direct requests. */
  caPem: string;
  /** Settings of the control plane under test: its proxy resolves the bench names and trusts the CA. */
  planeEnv: Record<string, string>;
  close(): Promise<void>;
}

export async function startBenchUpstream(): Promise<BenchUpstream> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-bench-egress-'));
  try {
    const file = (name: string): string => join(dir, name);
    const openssl = (...args: string[]) => run('openssl', args);
    await openssl(
      ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=sbx bench CA'],
      ...['-keyout', file('ca.key'), '-out', file('ca.pem')],
    );
    await openssl(
      ...['req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${BENCH_HOSTS.tunnel}`],
      ...['-keyout', file('server.key'), '-out', file('server.csr')],
    );
    await writeFile(
      file('san.ext'),
      `subjectAltName=${Object.values(BENCH_HOSTS)
        .map((h) => `DNS:${h}`)
        .join(',')}\n`,
    );
    await openssl(
      ...['x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial'],
      ...['-days', '2', '-extfile', file('san.ext'), '-out', file('server.pem')],
    );
    const bulk = Buffer.alloc(BULK_BYTES, 0x61);
    const server = https.createServer({ key: await readFile(file('server.key')), cert: await readFile(file('server.pem')) }, (req, res) => {
      req.resume();
      if (req.url === '/bulk') res.writeHead(200, { 'content-length': BULK_BYTES }).end(bulk);
      else res.writeHead(200, { 'content-length': 2 }).end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve));
    const dns = dns2.createServer({
      udp: true,
      handle: (request, send) => {
        const response = dns2.Packet.createResponseFromRequest(request);
        for (const q of request.questions)
          if (Object.values(BENCH_HOSTS).includes(q.name as never) && q.type === dns2.Packet.TYPE.A)
            response.answers.push(
              new dns2.Packet.Resource({
                name: q.name,
                type: dns2.Packet.TYPE.A,
                class: dns2.Packet.CLASS.IN,
                ttl: 60,
                address: '127.0.0.1',
              }),
            );
        send(response);
      },
    });
    const dnsAddress = (await dns.listen({ udp: { port: 0, address: '127.0.0.1' } })).udp as AddressInfo;
    return {
      port: (server.address() as AddressInfo).port,
      caPem: await readFile(file('ca.pem'), 'utf8'),
      planeEnv: { SBX_EGRESS_DNS_SERVERS: `127.0.0.1:${dnsAddress.port}`, SBX_EGRESS_UPSTREAM_CA: file('ca.pem') },
      close: async () => {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await dns.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
