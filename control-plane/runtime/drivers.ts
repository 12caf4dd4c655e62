/**
 * The runtime driver a control plane runs, chosen by `SBX_RUNTIME` (runtime/schema.ts): Docker
 * on one engine, or Kubernetes. Everything above the port (runtime.ts) is the same for both.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AGENT_CONFIG_DIR } from '../policies/compiler.js';
import { DockerImages } from './docker-image-engine.js';
import { DockerRuntime } from './docker-runtime.js';
import { noImageEngine, type ImageEngine } from './image-engine.js';
import { KubernetesRuntime } from './kubernetes-runtime.js';
import type { Ownership, SandboxRuntime } from './runtime.js';
import type { KubernetesSettings } from './schema.js';

export interface DriverSettings {
  runtime: { kind: 'docker' } | ({ kind: 'kubernetes' } & KubernetesSettings);
  dockerSocket: string;
  dataDir: string;
}

/** The driver of `settings.runtime`, for `ownership`'s sandboxes. */
export function createRuntime(settings: DriverSettings, ownership: Ownership, log: Logger): SandboxRuntime {
  if (settings.runtime.kind === 'kubernetes') {
    const { kind: _, plainHttpRegistries, ...k8s } = settings.runtime;
    return new KubernetesRuntime({ ...k8s, plainHttpRegistries: new Set(plainHttpRegistries), agentConfigDir: AGENT_CONFIG_DIR, log });
  }
  // One directory per installation, as for volumes: snapshots' roots (snapshot-roots.ts). Image
  // facts hold for any installation (image-survey.ts).
  return new DockerRuntime(settings.dockerSocket, {
    snapshotDir: join(settings.dataDir, 'snapshots', ownership.installation),
    surveyDir: join(settings.dataDir, 'image-survey'),
  });
}

/**
 * The engine image builds run on: the Docker engine's; none with the Kubernetes driver, whose
 * sandboxes run images from registries (builds are `501 runtime.unsupported`).
 */
export function createImageEngine(settings: DriverSettings, builds: { helperImage: string; agentRuntimeDir: string }): ImageEngine {
  if (settings.runtime.kind === 'kubernetes')
    return noImageEngine('kubernetes', 'sandbox images come from a registry the nodes pull from: build and push them there');
  return new DockerImages(settings.dockerSocket, builds);
}
