/**
 * The node relay (contract/link.ts): one per node that runs sandboxes on another machine than
 * the control plane. It serves Unix sockets in a node directory that the Kubernetes driver mounts
 * into each sandbox, and pipes every connection to a TCP address: `redis.sock` to Redis, and
 * `link.sock` to the control plane's link listener. It holds no credential and reads nothing it
 * pipes: the agent authenticates to Redis with its own ACL user and to the control plane with
 * its lease's link token. Each socket is mode 0600, root's: in a sandbox, the agent (root) may
 * connect, the tool user may not.
 *
 * Usage: `node node-relay/main.js --forward unix:/dir/redis.sock=tcp:host:6379 --forward unix:/dir/link.sock=tcp:host:7071`
 * (`tcp:host:port=unix:/path` also works: the lab exposes its Redis socket to the nodes so).
 * Stops on SIGTERM or SIGINT, removing its sockets.
 */
import { chmod, mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import { dirname } from 'node:path';
import { spliceSockets } from '../contract/splice.js';

type Address = { path: string } | { host: string; port: number };

/** `unix:/path` or `tcp:host:port`. Throws Error for anything else. */
export function parseAddress(text: string): Address {
  if (text.startsWith('unix:/')) return { path: text.slice('unix:'.length) };
  const tcp = /^tcp:(.+):(\d{1,5})$/.exec(text);
  if (tcp) return { host: tcp[1]!, port: Number(tcp[2]) };
  throw new Error(`not an address: ${text} (unix:/path or tcp:host:port)`);
}

/** Listens on `from` and pipes each connection to `to`; resolves once listening. */
export async function relay(from: Address, to: Address, log: (line: string) => void): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    client.setNoDelay?.(true);
    const upstream = net.connect({ ...to, allowHalfOpen: true });
    upstream.setNoDelay?.(true);
    spliceSockets(client, upstream, (err, side) => side === 'b' && log(`relay ${describe(from)} -> ${describe(to)}: ${err.message}`));
  });
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
  return 'path' in address ? `unix:${address.path}` : `tcp:${address.host}:${address.port}`;
}

async function main(argv: string[]): Promise<void> {
  const pairs: Array<[Address, Address]> = [];
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1] ?? ''];
    const eq = value.indexOf('=');
    if (flag !== '--forward' || eq < 0) throw new Error('usage: --forward FROM=TO [--forward FROM=TO ...]');
    pairs.push([parseAddress(value.slice(0, eq)), parseAddress(value.slice(eq + 1))]);
  }
  if (pairs.length === 0) throw new Error('usage: --forward FROM=TO [--forward FROM=TO ...]');
  const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
  const servers = await Promise.all(pairs.map(([from, to]) => relay(from, to, log)));
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
