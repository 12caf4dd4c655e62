/**
 * The way out of a build whose network is `proxy` (image-engine.ts): a helper container with no
 * interface but loopback (Docker `NetworkMode: none`) in which the agent runtime's node forwards
 * 127.0.0.1:BUILD_PROXY_PORT to the control plane's egress proxy socket (its directory
 * bind-mounted read-only, as in an allowlist sandbox). The build's RUN steps join this
 * container's network namespace (the build API's `networkmode: container:<id>`, which the classic
 * builder takes for every RUN step), so loopback is all they have and the forwarder the only
 * thing on it that leads anywhere; the egress proxy decides every connection. Nothing here
 * depends on the engine's firewall (it works the same with `dockerd --iptables=false`).
 *
 * The helper removes itself: it exits at the build's deadline (`lifetimeMs`) and is created with
 * `AutoRemove`, so a control plane that dies mid-build leaves nothing running for long.
 */
import { basename, dirname } from 'node:path';
import type Docker from 'dockerode';
import { AGENT_RUNTIME_DIR, AGENT_RUNTIME_NODE } from '../../contract/agent-runtime.js';
import { AppError } from '../../contract/errors.js';
import { LABEL } from './runtime.js';

/** The loopback port of a build's proxy (the conventional squid port, as in allowlist sandboxes). */
export const BUILD_PROXY_PORT = 3128;
/** Where the egress proxy's socket directory appears in the helper. */
const SOCKET_DIR = '/run/sbx/egress';
/** The line the forwarder prints once it listens. */
const READY = 'sbx-build-proxy ready';
/** How long the helper may take to listen, ms. */
const READY_TIMEOUT_MS = 20_000;
/** The helper's memory limit (node idles at ~40 MB), bytes. */
const HELPER_MEMORY_BYTES = 128 * 1024 * 1024;

/**
 * The forwarder, run as `node -e FORWARDER <port> <socket> <lifetimeMs>`: listens on loopback,
 * pipes each connection to the socket, exits after `lifetimeMs`. It decides nothing.
 */
const FORWARDER = `
const net = require('net');
const [port, socketPath, lifetimeMs] = process.argv.slice(1);
const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  client.pipe(upstream);
  upstream.pipe(client);
  const end = () => { client.destroy(); upstream.destroy(); };
  client.on('error', end); upstream.on('error', end); client.on('close', end); upstream.on('close', end);
});
server.listen(Number(port), '127.0.0.1', () => console.log(${JSON.stringify(READY)}));
setTimeout(() => process.exit(0), Number(lifetimeMs));
process.on('SIGTERM', () => process.exit(0));
`;

/** The predefined proxy build args (Docker keeps them out of the image's config and history) for the proxy on loopback. */
export function proxyBuildArgs(): Record<string, string> {
  const url = `http://127.0.0.1:${BUILD_PROXY_PORT}`;
  const noProxy = 'localhost,127.0.0.1,::1';
  return { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: noProxy, no_proxy: noProxy };
}

export interface BuildProxySpec {
  /** The egress proxy's Unix socket on this host. */
  socketPath: string;
  /** An image on the engine to run the helper from (its content is not used: the runtime is mounted). */
  image: string;
  /** Host directory of the agent runtime (mounted read-only at AGENT_RUNTIME_DIR). */
  agentRuntimeDir: string;
  labels: Record<string, string>;
  /** The helper exits after this long (the build's time limit), ms. */
  lifetimeMs: number;
}

/**
 * Starts the helper of one build and resolves with its container id once its forwarder listens.
 * Throws `image.build_failed` when it cannot start (the helper is removed then).
 */
export async function startBuildProxy(docker: Docker, spec: BuildProxySpec): Promise<string> {
  let container: Docker.Container | undefined;
  try {
    container = await docker.createContainer({
      Image: spec.image,
      Labels: { ...spec.labels, [LABEL.role]: 'build-proxy' },
      Entrypoint: [
        AGENT_RUNTIME_NODE,
        '-e',
        FORWARDER,
        String(BUILD_PROXY_PORT),
        `${SOCKET_DIR}/${basename(spec.socketPath)}`,
        String(Math.min(Math.max(1, Math.round(spec.lifetimeMs)), 2 ** 31 - 1)),
      ],
      Cmd: [],
      // The image's env must not steer the runtime's node.
      Env: ['NODE_OPTIONS=', 'NODE_PATH='],
      User: '0:0',
      WorkingDir: '/',
      NetworkDisabled: true,
      HostConfig: {
        NetworkMode: 'none',
        ReadonlyRootfs: true,
        Mounts: [
          { Type: 'bind', Source: spec.agentRuntimeDir, Target: AGENT_RUNTIME_DIR, ReadOnly: true },
          { Type: 'bind', Source: dirname(spec.socketPath), Target: SOCKET_DIR, ReadOnly: true },
        ],
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges:true'],
        Memory: HELPER_MEMORY_BYTES,
        MemorySwap: HELPER_MEMORY_BYTES,
        PidsLimit: 64,
        IpcMode: 'private',
        AutoRemove: true,
        RestartPolicy: { Name: 'no' },
      },
    });
    const logs = (await container.attach({ stream: true, stdout: true, stderr: true })) as NodeJS.ReadableStream;
    const ready = waitForLine(logs, READY, READY_TIMEOUT_MS);
    await container.start();
    await ready;
    return container.id;
  } catch (err) {
    if (container) await stopBuildProxy(docker, container.id);
    throw new AppError('image.build_failed', `the build's network proxy could not start: ${(err as Error).message}`, { cause: err });
  }
}

/** Removes the helper (absence is success). */
export async function stopBuildProxy(docker: Docker, containerId: string): Promise<void> {
  await docker
    .getContainer(containerId)
    .remove({ force: true })
    .catch(() => undefined);
}

/** Resolves when `stream` carries `line`; rejects when it ends first or after `timeoutMs`. */
function waitForLine(stream: NodeJS.ReadableStream, line: string, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let seen = '';
    const done = (err?: Error): void => {
      clearTimeout(timer);
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      (stream as unknown as { destroy?: () => void }).destroy?.();
      if (err) reject(err);
      else resolve();
    };
    const onData = (chunk: Buffer): void => {
      // Attach output is multiplexed (8-byte frame headers); the text survives between them.
      seen = (seen + chunk.toString('utf8')).slice(-4096);
      if (seen.includes(line)) done();
    };
    const onEnd = (): void => done(new Error(`it exited before listening: ${seen.replace(/[\x00-\x08]/g, '').trim()}`));
    const timer = setTimeout(() => done(new Error(`it did not listen within ${timeoutMs} ms`)), timeoutMs);
    stream.on('data', onData);
    stream.once('end', onEnd);
  });
}
