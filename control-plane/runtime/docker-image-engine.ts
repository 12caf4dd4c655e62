/**
 * Images on the Docker engine (dockerode), the `ImageEngine` port (image-engine.ts): inspect,
 * pull from a registry, build from a context tar under limits, tag, remove, and which sandboxes
 * use an image. Docker errors are translated once here into AppErrors, keeping the original as
 * `cause`.
 */
import Docker from 'dockerode';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { proxyBuildArgs, startBuildProxy, stopBuildProxy } from './build-proxy.js';
import { imageConfigOf } from './docker-images.js';
import type { EngineBuild, EngineImage, ImageEngine } from './image-engine.js';
import { LABEL, ownershipLabels, type Ownership } from './runtime.js';

const Inspect = z.object({
  Id: z.string(),
  RepoDigests: z.array(z.string()).nullable().default([]),
  Size: z.number().default(0),
  Config: z
    .object({ Labels: z.record(z.string(), z.string()).nullable().default({}) })
    .nullable()
    .default({ Labels: {} }),
});
const ContainerSummary = z.object({ Id: z.string(), ImageID: z.string().default(''), Labels: z.record(z.string(), z.string()).nullable() });
/** One line of the builder's or the puller's JSON stream. */
const Progress = z.object({
  stream: z.string().optional(),
  status: z.string().optional(),
  error: z.string().optional(),
  errorDetail: z.object({ message: z.string().optional() }).optional(),
  aux: z.object({ ID: z.string().optional() }).optional(),
});

/** What builds with network `proxy` need: the image the proxy helper runs from and the agent runtime it runs (build-proxy.ts). */
export interface BuildProxyOptions {
  /** An image on the engine (the sandbox image). */
  helperImage: string;
  /** Host directory of the agent runtime. */
  agentRuntimeDir: string;
}

export class DockerImages implements ImageEngine {
  private readonly docker: Docker;
  /** Pulls in progress in this process, by reference: concurrent creates of one image pull it once. */
  private readonly pulls = new Map<string, Promise<void>>();
  readonly buildProxy: boolean;
  readonly buildsUnsupported = null;

  /**
   * `socketPath`: the Docker engine's API socket. `proxy`: what builds with network `proxy`
   * need; without it, or with an engine on another host (a `tcp://` or `ssh://` address: the
   * egress socket cannot be mounted there), `buildProxy` is false.
   */
  constructor(
    socketPath: string,
    private readonly proxy?: BuildProxyOptions,
  ) {
    this.docker = new Docker({ socketPath });
    this.buildProxy = proxy !== undefined && !socketPath.includes('://');
  }

  async inspect(ref: string): Promise<EngineImage | null> {
    try {
      const document: unknown = await this.docker.getImage(ref).inspect();
      const i = Inspect.parse(document);
      return {
        id: i.Id,
        repoDigests: i.RepoDigests ?? [],
        sizeBytes: i.Size,
        labels: i.Config?.Labels ?? {},
        config: imageConfigOf(document),
      };
    } catch (err) {
      // 404: no such image; 400: a reference the engine cannot parse (the caller validated it).
      if (statusOf(err) === 404 || statusOf(err) === 400) return null;
      throw unavailable('inspect image', err);
    }
  }

  pull(ref: string): Promise<void> {
    const running = this.pulls.get(ref);
    if (running) return running;
    const pulling = this.pullOnce(ref).finally(() => this.pulls.delete(ref));
    this.pulls.set(ref, pulling);
    return pulling;
  }

  private async pullOnce(ref: string): Promise<void> {
    let stream: NodeJS.ReadableStream;
    try {
      stream = (await this.docker.pull(ref)) as NodeJS.ReadableStream;
    } catch (err) {
      throw pullError(ref, messageOf(err), err);
    }
    const failure = await new Promise<string | null>((resolve) => {
      let error: string | null = null;
      this.docker.modem.followProgress(
        stream,
        (err: Error | null) => resolve(err ? messageOf(err) : error),
        (event: unknown) => {
          const p = Progress.safeParse(event);
          if (p.success && (p.data.error || p.data.errorDetail?.message))
            error = p.data.errorDetail?.message ?? p.data.error ?? 'pull failed';
        },
      );
    });
    if (failure !== null) throw pullError(ref, failure, undefined);
  }

  async build(spec: EngineBuild): Promise<{ imageId: string }> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), spec.timeoutMs);
    const untagged = `${spec.tag}-building`;
    let helper: string | null = null;
    try {
      let networkmode = 'none';
      let buildargs = spec.buildArgs;
      if (spec.network !== 'none') {
        if (!this.proxy || !this.buildProxy)
          throw new AppError('policy.unenforceable', 'this engine cannot run a build behind the egress proxy', {
            details: { field: 'network' },
          });
        helper = await startBuildProxy(this.docker, {
          socketPath: spec.network.proxySocketPath,
          image: this.proxy.helperImage,
          agentRuntimeDir: this.proxy.agentRuntimeDir,
          labels: spec.labels,
          lifetimeMs: spec.timeoutMs,
        });
        networkmode = `container:${helper}`;
        // The proxy's variables win over a build arg of the same name.
        buildargs = { ...spec.buildArgs, ...proxyBuildArgs() };
      }
      let stream: NodeJS.ReadableStream;
      try {
        stream = (await this.docker.buildImage(spec.context as unknown as NodeJS.ReadableStream, {
          // Tagged under a name of its own first: the real tag is set only after the build ends well.
          t: untagged,
          dockerfile: spec.dockerfile,
          buildargs,
          labels: spec.labels,
          networkmode,
          memory: spec.memoryBytes,
          memswap: spec.memoryBytes,
          cpuperiod: 100_000,
          cpuquota: Math.max(1000, Math.round(spec.cpus * 100_000)),
          rm: true,
          forcerm: true,
          abortSignal: abort.signal,
        })) as NodeJS.ReadableStream;
      } catch (err) {
        throw buildFailed(abort.signal.aborted ? timeoutMessage(spec.timeoutMs) : messageOf(err), err);
      }
      const outcome = await new Promise<{ error: string | null; imageId: string | null }>((resolve) => {
        let error: string | null = null;
        let imageId: string | null = null;
        this.docker.modem.followProgress(
          stream,
          (err: Error | null) => resolve({ error: err ? messageOf(err) : error, imageId }),
          (event: unknown) => {
            const p = Progress.safeParse(event);
            if (!p.success) return;
            if (p.data.stream) spec.onLog(p.data.stream);
            if (p.data.aux?.ID) imageId = p.data.aux.ID;
            if (p.data.error || p.data.errorDetail?.message) error = p.data.errorDetail?.message ?? p.data.error ?? 'build failed';
          },
        );
      });
      if (abort.signal.aborted) throw buildFailed(timeoutMessage(spec.timeoutMs), undefined);
      if (outcome.error !== null) throw buildFailed(outcome.error.trim(), undefined);
      const built = await this.inspect(untagged);
      if (!built) throw buildFailed('the builder reported no image', undefined);
      const [repo, tag] = splitTag(spec.tag);
      await this.docker.getImage(built.id).tag({ repo, tag });
      return { imageId: built.id };
    } finally {
      clearTimeout(timer);
      if (helper !== null) await stopBuildProxy(this.docker, helper);
      // The temporary name never outlives the build, whatever happened.
      await this.docker
        .getImage(untagged)
        .remove({ noprune: true })
        .catch(() => undefined);
    }
  }

  async remove(ref: string): Promise<void> {
    try {
      await this.docker.getImage(ref).remove();
    } catch (err) {
      if (statusOf(err) === 404) return;
      if (statusOf(err) === 409)
        throw new AppError('image.in_use', `image ${ref} is used by a container`, { details: { image: ref }, cause: err });
      throw unavailable('remove image', err);
    }
  }

  async usedBy(imageId: string, ownership: Ownership): Promise<string[]> {
    const filters = JSON.stringify({ label: Object.entries(ownershipLabels(ownership)).map(([k, v]) => `${k}=${v}`) });
    let listed: unknown;
    try {
      listed = await this.docker.listContainers({ all: true, filters });
    } catch (err) {
      throw unavailable('list containers', err);
    }
    return z
      .array(ContainerSummary)
      .parse(listed)
      .filter((c) => c.ImageID === imageId)
      .map((c) => c.Labels?.[LABEL.lease] ?? c.Id);
  }
}

/** `repo:tag` → [repo, tag]; the tag is what follows the last `:` after the last `/`. */
function splitTag(ref: string): [string, string] {
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  return colon > slash ? [ref.slice(0, colon), ref.slice(colon + 1)] : [ref, 'latest'];
}

function timeoutMessage(ms: number): string {
  return `the build took longer than its limit of ${Math.round(ms / 1000)} s and was stopped`;
}

function buildFailed(message: string, cause: unknown): AppError {
  return new AppError('image.build_failed', message, { details: { builder: message.slice(0, 2000) }, ...(cause ? { cause } : {}) });
}

function pullError(ref: string, message: string, cause: unknown): AppError {
  const extra = cause ? { cause } : {};
  // The registry answered that it has no such repository or tag.
  if (statusOf(cause) === 404 || /manifest unknown|not found|does not exist|name unknown/i.test(message))
    return new AppError('image.not_found', `image ${ref} is neither on this engine nor in its registry: ${message}`, {
      details: { field: 'image', image: ref },
      ...extra,
    });
  return new AppError('image.pull_failed', `image ${ref} could not be pulled: ${message}`, {
    details: { field: 'image', image: ref },
    ...extra,
  });
}

function unavailable(what: string, err: unknown): AppError {
  return new AppError('runtime.unavailable', `Docker engine: ${what} failed: ${messageOf(err)}`, { cause: err });
}

function statusOf(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'statusCode' in err ? Number((err as { statusCode: unknown }).statusCode) : undefined;
}

function messageOf(err: unknown): string {
  if (typeof err === 'object' && err !== null && 'json' in err) {
    const json = (err as { json?: { message?: string } | string }).json;
    if (typeof json === 'object' && json?.message) return json.message;
    if (typeof json === 'string' && json) return json;
  }
  return err instanceof Error ? err.message : String(err);
}
