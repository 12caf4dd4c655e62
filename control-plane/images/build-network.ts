/**
 * The network of one build under the build policy: for `{allow: rules}`, the control plane's
 * egress proxy serves the build (keyed by its image id, so every connection lands in the build's
 * egress log) on a Unix socket of its own, `<egress dir>/<image id>/proxy.sock`, which the engine
 * bridges into the build's RUN steps (runtime/build-proxy.ts); for `none`, nothing.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { EgressProxy } from '../egress/proxy.js';
import type { EngineBuild } from '../runtime/image-engine.js';
import type { BuildNetwork } from './schema.js';

/** What a build's network needs: the egress proxy, and the host directory its build sockets go under. */
export interface BuildNetworkDeps {
  egress: Pick<EgressProxy, 'serve' | 'stop'>;
  /** Host directory of egress sockets (`<data dir>/egress`); a build's is `<dir>/<image id>`. */
  socketDir: string;
}

/** The file name of a build's proxy socket. */
const SOCKET_NAME = 'proxy.sock';

/** Starts serving `imageId`'s egress under `network` and returns the engine's network of the build. Throws what `EgressProxy.serve` throws. */
export async function openBuildNetwork(deps: BuildNetworkDeps, network: BuildNetwork, imageId: string): Promise<EngineBuild['network']> {
  if (network === 'none') return 'none';
  const proxySocketPath = join(deps.socketDir, imageId, SOCKET_NAME);
  await deps.egress.serve(imageId, network.allow, proxySocketPath);
  return { proxySocketPath };
}

/** Stops serving `imageId`'s egress and removes its socket directory (idempotent; every step runs). */
export async function closeBuildNetwork(deps: BuildNetworkDeps, imageId: string): Promise<void> {
  await deps.egress.stop(imageId).catch(() => undefined);
  await rm(join(deps.socketDir, imageId), { recursive: true, force: true });
}
