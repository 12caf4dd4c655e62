/**
 * The floor of the preview design, measured beside it: the same hops with nothing of sbx in them.
 * A bare Node HTTP proxy (a process on the host: Node's HTTP server and client, nothing checked,
 * nothing logged) forwards each request over a Unix socket to a bare Node relay (a process in a
 * network-`none` container of the same image, piping the socket to 127.0.0.1) in front of the
 * same server program. What the preview costs above this is sbx's own work (keys, policy,
 * tunnel protocol, log); what this costs above the direct GET is the design's: two more
 * processes on the path, each an event loop woken per request.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { BenchContext } from '../context.js';

/** The relay in the container: each connection to the socket is piped to the server's port. */
const RELAY_JS = `
const net = require('net'), fs = require('fs');
const path = '/relay/relay.sock';
fs.rmSync(path, { force: true });
net.createServer((c) => {
  const s = net.connect(Number(process.env.PORT), '127.0.0.1');
  c.pipe(s); s.pipe(c);
  c.on('error', () => s.destroy()); s.on('error', () => c.destroy());
}).listen(path, () => fs.chmodSync(path, 0o666));`;

/** The proxy on the host: prints its port, then forwards every request through the relay's socket. */
const PROXY_JS = `
const http = require('http'), net = require('net');
const server = http.createServer((req, res) => {
  const up = http.request({ method: req.method, path: req.url, headers: req.headers, setHost: false,
    createConnection: () => net.connect(process.env.SOCK) }, (a) => { res.writeHead(a.statusCode, a.rawHeaders); a.pipe(res); });
  up.on('error', () => res.destroy());
  req.pipe(up);
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));`;

/** A running bare chain: its base URL, and how to remove it (the proxy by pid, the container, the socket dir). */
export interface BareChain {
  url: string;
  /** Host pids of the proxy and of the relay (the container's process), for their CPU time. */
  proxyPid: number;
  relayPid: number;
  stop(): Promise<void>;
}

/**
 * Starts the bare chain in front of `python3 -m http.server <port>` run after `setup` (a shell
 * command that writes the site to /tmp/site) in a network-`none` container of the bench image.
 * Removes what it made when it fails to start.
 */
export async function startBareChain(ctx: BenchContext, setup: string, port: number): Promise<BareChain> {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-bench-relay-'));
  // The relay runs as the image's tool user; the socket is made in this directory.
  chmodSync(dir, 0o777);
  const container = await ctx.docker.createContainer({
    Image: ctx.image,
    Entrypoint: [
      '/bin/sh',
      '-c',
      `${setup} && cd /tmp/site && { python3 -m http.server ${port} --bind 127.0.0.1 & } && exec node -e "$RELAY_JS"`,
    ],
    Env: [`RELAY_JS=${RELAY_JS}`, `PORT=${port}`],
    Labels: ctx.labels,
    User: '1000:1000',
    HostConfig: { NetworkMode: 'none', Binds: [`${dir}:/relay`] },
  });
  const proxy = spawn(process.execPath, ['-e', PROXY_JS], {
    env: { SOCK: join(dir, 'relay.sock') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const stop = async (): Promise<void> => {
    proxy.kill();
    await container.remove({ force: true }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await container.start();
    const lines = createInterface({ input: proxy.stdout! });
    const first = await new Promise<string>((resolve, reject) => {
      lines.once('line', resolve);
      proxy.once('exit', (code) => reject(new Error(`the bare proxy exited ${code} before it listened`)));
    });
    lines.close();
    const relayPid = (await container.inspect()).State.Pid;
    return { url: `http://127.0.0.1:${Number(first)}`, proxyPid: proxy.pid!, relayPid, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
