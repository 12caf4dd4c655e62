/**
 * The node relay (contract/link.ts): one per node that runs sandboxes on another machine than
 * the control plane. It serves Unix sockets in a node directory that the Kubernetes driver mounts
 * into each sandbox, and pipes every connection to a TCP address: `redis.sock` to Redis, and
 * `link.sock` to the control plane's link listener. It holds no credential and reads nothing it
 * pipes: the agent authenticates to Redis with its own ACL user and to the control plane with
 * its lease's link token. Each socket is mode 0600, root's: in a sandbox, the agent (root) may
 * connect, the tool user may not.
 *
 * Usage: `node node-relay/main.js --forward unix:/dir/redis.sock=tls:host:6379 --forward unix:/dir/link.sock=tls:host:7071`.
 * A `tls:` target is dialled with TLS (RFC 8446), its certificate checked against the host named
 * (the system's CAs, plus `NODE_EXTRA_CA_CERTS`, Node's own setting for a private CA); `tcp:` is
 * plain. A `tls:` or `tcp:` listener (`tls:host:port=unix:/path`: the lab exposes its Redis
 * socket to the nodes so) serves TLS with `--cert FILE --key FILE` (PEM). Stops on SIGTERM or
 * SIGINT, removing its sockets.
 */
import { chmod, mkdir, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { dirname } from 'node:path';
import tls from 'node:tls';
import { spliceSockets, tlsOver } from '../contract/splice.js';

type Address = { path: string } | { host: string; port: number; tls: boolean };

/** `unix:/path`, `tcp:host:port` or `tls:host:port`. Throws Error for anything else. */
export function parseAddress(text: string): Address {
  if (text.startsWith('unix:/')) return { path: text.slice('unix:'.length) };
  const inet = /^(tcp|tls):(.+):(\d{1,5})$/.exec(text);
  if (inet) return { host: inet[2]!, port: Number(inet[3]), tls: inet[1] === 'tls' };
  throw new Error(`not an address: ${text} (unix:/path, tcp:host:port or tls:host:port)`);
}

/** The certificate and key a `tls:` listener serves (PEM). */
export interface ServerIdentity {
  cert: Buffer;
  key: Buffer;
}

/** A connection to `to`: TLS, checked against its host name or address, for a `tls:` address. */
function dial(to: Address): net.Socket {
  if ('path' in to) return net.connect({ path: to.path, allowHalfOpen: true });
  const socket = net.connect({ host: to.host, port: to.port, allowHalfOpen: true });
  if (!to.tls) return socket;
  // Over a half-open TCP socket: TLS 1.3 lets each side close its writing alone (close_notify).
  return tlsOver(socket, to.host);
}

/** Listens on `from` and pipes each connection to `to`; resolves once listening. */
export async function relay(from: Address, to: Address, log: (line: string) => void, identity?: ServerIdentity): Promise<net.Server> {
  const onClient = (client: net.Socket): void => {
    client.setNoDelay?.(true);
    const upstream = dial(to);
    upstream.setNoDelay?.(true);
    spliceSockets(client, upstream, (err, side) => side === 'b' && log(`relay ${describe(from)} -> ${describe(to)}: ${err.message}`));
  };
  if (!('path' in from) && from.tls && !identity) throw new Error(`${describe(from)} needs --cert and --key`);
  const server =
    !('path' in from) && from.tls
      ? tls.createServer({ ...identity, allowHalfOpen: true }, onClient)
      : net.createServer({ allowHalfOpen: true }, onClient);
  if ('path' in from) {
    await mkdir(dirname(from.path), { recursive: true, mode: 0o700 });
    await rm(from.path, { force: true });
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(from, () => {
      server.off('error', reject);
      resolve();
    });
  });
  if ('path' in from) await chmod(from.path, 0o600);
  return server;
}

function describe(address: Address): string {
  return 'path' in address ? `unix:${address.path}` : `${address.tls ? 'tls' : 'tcp'}:${address.host}:${address.port}`;
}

async function main(argv: string[]): Promise<void> {
  const usage = 'usage: --forward FROM=TO [--forward FROM=TO ...] [--cert FILE --key FILE]';
  const pairs: Array<[Address, Address]> = [];
  const files: { cert?: string; key?: string } = {};
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1] ?? ''];
    if (flag === '--cert' || flag === '--key') {
      files[flag.slice(2) as 'cert' | 'key'] = value;
      continue;
    }
    const eq = value.indexOf('=');
    if (flag !== '--forward' || eq < 0) throw new Error(usage);
    pairs.push([parseAddress(value.slice(0, eq)), parseAddress(value.slice(eq + 1))]);
  }
  if (pairs.length === 0 || (files.cert === undefined) !== (files.key === undefined)) throw new Error(usage);
  const identity = files.cert && files.key ? { cert: readFileSync(files.cert), key: readFileSync(files.key) } : undefined;
  const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
  const servers = await Promise.all(pairs.map(([from, to]) => relay(from, to, log, identity)));
  log(`relaying ${pairs.map(([from, to]) => `${describe(from)} -> ${describe(to)}`).join(', ')}`);
  const stop = (): void => {
    for (const server of servers) server.close();
    void Promise.all(pairs.map(([from]) => ('path' in from ? rm(from.path, { force: true }) : undefined))).then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (process.argv[1]?.endsWith('node-relay/main.js'))
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`node relay: ${(err as Error).message}\n`);
    process.exit(2);
  });
