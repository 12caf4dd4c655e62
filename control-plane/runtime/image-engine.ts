/**
 * The images port: what the lease planner and the images domain need of the engine's images.
 * Docker implements it (docker-image-engine.ts).
 */
import type { Readable } from 'node:stream';
import { AppError } from '../../contract/errors.js';
import type { ImageConfig, Ownership } from './runtime.js';

/** An image on the engine: its id (`sha256:…`), its registry digests (`repo@sha256:…`) and its config, from one inspect. */
export interface EngineImage {
  id: string;
  repoDigests: string[];
  sizeBytes: number;
  labels: Record<string, string>;
  config: ImageConfig;
}

/** One build through the engine (the classic builder: every RUN step runs in a container of the engine's). */
export interface EngineBuild {
  /** The build context, a tar stream (checked before it gets here). */
  context: Readable;
  /** Path of the Dockerfile inside the context. */
  dockerfile: string;
  buildArgs: Record<string, string>;
  /** The tag the image gets when, and only when, the build succeeds. */
  tag: string;
  labels: Record<string, string>;
  /**
   * Network of the build's RUN steps. `none`: loopback only. `proxy`: loopback only too, where an
   * HTTP(S) proxy listens whose every connection goes to the Unix socket `socketPath` on the
   * engine's host (the control plane's egress proxy, which decides); the proxy variables are
   * passed as the predefined build args (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, lower-case
   * too), which the engine keeps out of the image's config and history.
   */
  network: 'none' | { proxySocketPath: string };
  /** CPU limit of each build step, in CPUs (period 100 ms). */
  cpus: number;
  /** Memory limit of each build step (swap included), bytes. */
  memoryBytes: number;
  /** Wall-clock limit of the whole build, ms. */
  timeoutMs: number;
  /** Called with each line of the builder's output, in order. */
  onLog: (text: string) => void;
}

/** What the lease planner and the images domain need of the engine. */
export interface ImageEngine {
  /** The image `ref` names on the engine, or null when there is none. Throws `runtime.unavailable`. */
  inspect(ref: string): Promise<EngineImage | null>;
  /**
   * Pulls `ref` from its registry. Throws `image.not_found` (the registry has no such
   * repository or tag) or `image.pull_failed` (the registry did not answer, refused, ...).
   */
  pull(ref: string): Promise<void>;
  /**
   * Builds `spec`; resolves with the new image's id once it is tagged. Throws
   * `image.build_failed` with the builder's message (a failing step, a COPY outside the
   * context, the time limit); the tag is then not set.
   */
  build(spec: EngineBuild): Promise<{ imageId: string }>;
  /**
   * Whether builds with network `proxy` can be enforced: the engine runs on this host (the
   * proxy's Unix socket is bind-mounted into the build's network namespace).
   */
  readonly buildProxy: boolean;
  /** Why this control plane builds no images, and under which runtime driver (noImageEngine); null when it builds. */
  readonly buildsUnsupported: { runtime: string; reason: string } | null;
  /** Removes the tag `ref` (and the image when nothing else holds it). Absence is success. Throws `image.in_use`. */
  remove(ref: string): Promise<void>;
  /** Lease ids of `ownership`'s containers (running or not) made from image `imageId`. */
  usedBy(imageId: string, ownership: Ownership): Promise<string[]>;
}

/**
 * The image engine of a control plane whose sandboxes run on no engine of its own (the
 * Kubernetes driver: sandbox images come from registries the nodes pull). It builds nothing:
 * `POST /v1/images` is `runtime.unsupported` naming `image builds` (ImageService.checkBuildPolicy),
 * and every call rejects with that error too.
 */
export function noImageEngine(runtime: string, reason: string): ImageEngine {
  const refuse = (): Promise<never> => Promise.reject(buildsUnsupportedError({ runtime, reason }));
  return {
    buildProxy: false,
    buildsUnsupported: { runtime, reason },
    inspect: refuse,
    pull: refuse,
    build: refuse,
    remove: refuse,
    usedBy: refuse,
  };
}

/** `runtime.unsupported` naming `image builds`, for an engine's `buildsUnsupported`. */
export function buildsUnsupportedError(unsupported: { runtime: string; reason: string }): AppError {
  return new AppError('runtime.unsupported', `the ${unsupported.runtime} driver has no image builds: ${unsupported.reason}`, {
    details: { feature: 'image builds', runtime: unsupported.runtime },
  });
}
