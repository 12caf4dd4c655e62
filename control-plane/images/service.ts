/**
 * Images: resolving the image a lease names (a tenant's built image by id or name, else an
 * engine image, pulled on demand from an allowlisted registry), and building images from a
 * context tar under the admin build policy, tagged by content digest so the same input gives the
 * same image without a rebuild. A build runs in this process; its log lines and its end are
 * events (`ImageStore.appendEvent`). A build whose process died counts as failed once its
 * deadline passed.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { Logger } from 'pino';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import { seesTenant, type Principal } from '../http/auth.js';
import { allowlistDigest } from '../egress/rules.js';
import type { EgressLog } from '../egress/store.js';
import { buildsUnsupportedError, type ImageEngine } from '../runtime/image-engine.js';
import type { ImageConfig } from '../runtime/runtime.js';
import { ownershipLabels, type Ownership } from '../runtime/runtime.js';
import { closeBuildNetwork, openBuildNetwork, type BuildNetworkDeps } from './build-network.js';
import { baseImages } from './dockerfile.js';
import { checkRegistry, parseImageRef, type ImageRef } from './reference.js';
import { ImageId, toImageView, type BuildPolicy, type ImageEventBody, type ImageRecord, type ImageView } from './schema.js';
import type { ImageStore } from './store.js';

/** Labels on every image sbx builds: its image id (`img_…`) and its tenant. (`sbx.image` is the sandbox image's own label.) */
export const IMAGE_LABEL = { image: 'sbx.build.image', tenant: 'sbx.build.tenant' } as const;

/** Labels of a snapshot image (control-plane/snapshots/service.ts sets them): its id and its tenant. */
const SNAPSHOT_LABEL = { id: 'sbx.snapshot.id', tenant: 'sbx.snapshot.tenant' } as const;

/** Time past a build's limit after which a record still `building` is taken for failed (its process died), ms. */
const DEADLINE_MARGIN_MS = 60_000;

/** The image a lease runs, as the planner needs it. */
export interface ResolvedImage {
  /** The reference the engine knows it by (a built image's `sbx-built:<hex>` tag). */
  engineRef: string;
  /** The engine's image id (`sha256:…`). */
  imageId: string;
  /** The registry digest (`repo@sha256:…`) when the image came from (or was pushed to) a registry, else null. */
  digest: string | null;
  /** Whether it was pulled for this lease. */
  pulled: boolean;
  /** The image's config when resolving read it (an engine image): the lease planner need not ask the engine again. */
  config?: ImageConfig;
}

export interface ImageServiceDeps {
  store: ImageStore;
  engine: ImageEngine;
  audit: Pick<AuditLog, 'record'>;
  ownership: Ownership;
  /** `SBX_IMAGE_REGISTRIES`: registries (`host[:port]`) images may be pulled from. */
  registries: readonly string[];
  buildPolicy: BuildPolicy;
  /** The egress proxy and socket directory of builds whose policy network is `{allow}`. */
  buildNetwork: BuildNetworkDeps;
  /** The builds' egress logs (keyed by image id): cleared when an image is built again or deleted. */
  egressLog: Pick<EgressLog, 'clear'>;
  now: () => Date;
  log: Logger;
}

/** A checked build context, spooled to a file the service owns from here on (it removes it). */
export interface BuildInput {
  contextPath: string;
  contextBytes: number;
  /** Hex sha256 of the context as uploaded. */
  contextSha256: string;
  dockerfile: string;
  buildArgs: Record<string, string>;
  name?: string | undefined;
}

export class ImageService {
  /** Builds running in this process, by image id. */
  private readonly running = new Map<string, Promise<void>>();

  constructor(private readonly deps: ImageServiceDeps) {}

  /**
   * The image `ref` names for a lease of `tenant`: the tenant's built image (by `img_…` id or
   * by name), else an engine image, pulled when absent and its registry allowlisted. Throws
   * `image.invalid_reference`, `image.registry_not_allowed` (400), `image.not_found` (404:
   * neither present nor pullable, or another tenant's build), `image.pull_failed`,
   * `runtime.unavailable`. Creates nothing but the pulled image.
   */
  async resolve(ref: string, tenant: string | null): Promise<ResolvedImage> {
    const built = await this.builtFor(ref, tenant);
    if (built) return { engineRef: built.engineRef, imageId: built.engineImageId!, digest: null, pulled: false };
    return this.resolveEngine(ref, tenant);
  }

  /** An engine image (pulled when absent and its registry allowlisted), never another tenant's build. Throws as `resolve`. */
  private async resolveEngine(ref: string, tenant: string | null): Promise<ResolvedImage> {
    const parsed = parseImageRef(ref);
    const { pullable } = checkRegistry(parsed, this.deps.registries);
    let found = await this.deps.engine.inspect(ref);
    let pulled = false;
    if (!found && pullable) {
      await this.deps.engine.pull(ref);
      found = await this.deps.engine.inspect(ref);
      pulled = true;
    }
    // Another tenant's build or snapshot is as absent as a missing image, also when named by its
    // engine tag (`sbx-built:<hex>`, `sbx-snapshot:<hex>`, or its image id).
    const built = found?.labels[IMAGE_LABEL.image] !== undefined;
    const snapshot = found?.labels[SNAPSHOT_LABEL.id] !== undefined;
    const owner = built ? found?.labels[IMAGE_LABEL.tenant] : found?.labels[SNAPSHOT_LABEL.tenant];
    if (!found || ((built || snapshot) && owner !== tenant)) {
      throw new AppError(
        'image.not_found',
        pullable
          ? `image ${ref} is neither on this engine nor in its registry`
          : `image ${ref} is not on this engine, and its registry (${parsed.registry ?? 'docker.io'}) is not one images are pulled from`,
        { details: { field: 'image', image: ref } },
      );
    }
    return { engineRef: ref, imageId: found.id, digest: repoDigest(parsed, found.repoDigests), pulled, config: found.config };
  }

  /** `tenant`'s ready built image that `ref` names (id or name), or undefined when `ref` names none. Throws `image.not_found` for an id that is not the tenant's ready image. */
  private async builtFor(ref: string, tenant: string | null): Promise<ImageRecord | undefined> {
    const isId = ImageId.safeParse(ref).success;
    const id = isId ? ref : tenant === null ? null : await this.deps.store.byName(tenant, ref);
    if (id === null) return undefined;
    const record = await this.deps.store.get(id);
    if (record && record.tenant === tenant && record.status === 'ready') return record;
    if (!isId && !record) return undefined;
    throw new AppError('image.not_found', `no ready image ${ref}`, { details: { field: 'image', image: ref } });
  }

  /**
   * Checks the images `dockerfile` builds on (`FROM`, `COPY --from`) as a lease's image is
   * checked, pulling those of allowlisted registries now, so the engine's builder never pulls
   * on its own (it would reach any registry) and never builds on another tenant's image. A
   * tenant's built images are not bases (their engine tags are private). Throws
   * `image.invalid_reference` (the Dockerfile's, or a base's), `image.registry_not_allowed`,
   * `image.not_found`, `image.pull_failed`.
   */
  async checkBases(dockerfile: string, buildArgs: Readonly<Record<string, string>>, tenant: string): Promise<void> {
    for (const base of baseImages(dockerfile, buildArgs)) {
      try {
        if ((await this.builtFor(base.ref, tenant).catch(() => undefined)) !== undefined)
          throw new AppError(
            'image.not_found',
            `${base.ref} is one of your built images, and a build cannot start FROM a built image: start from its base and add its steps to this Dockerfile`,
            { details: { field: 'image', image: base.ref, reason: 'built_image_as_base' } },
          );
        await this.resolveEngine(base.ref, tenant);
      } catch (err) {
        if (err instanceof AppError) {
          throw new AppError(err.code, `Dockerfile line ${base.line}: ${err.message}`, {
            details: { ...err.details, field: 'dockerfile', line: base.line, image: base.ref },
            cause: err,
          });
        }
        throw err;
      }
    }
  }

  /**
   * Throws `runtime.unsupported` (501) when this control plane builds no images (noImageEngine),
   * `policy.unenforceable` (422) when the build policy asks for what this engine cannot enforce: network hosts (`{allow}`) with an engine on another host, where the egress proxy's
   * socket cannot reach the build.
   */
  checkBuildPolicy(): void {
    const unsupported = this.deps.engine.buildsUnsupported;
    if (unsupported !== null) throw buildsUnsupportedError(unsupported);
    const { network } = this.deps.buildPolicy;
    if (network !== 'none' && !this.deps.engine.buildProxy)
      throw new AppError(
        'policy.unenforceable',
        `the build policy allows network hosts during builds, and this Docker engine is not on the control plane's host, so the egress proxy cannot be the build's only way out; builds are refused (use network "none")`,
        { details: { field: 'network', hosts: network.allow.map((r) => ('host' in r ? r.host : r.cidr)) } },
      );
  }

  /**
   * Builds `input` for `by`'s tenant, or returns the image the same input made before (`created`
   * false; a failed one is built again). The build runs on after this returns; its events tell
   * how it ends. Throws `policy.unenforceable`.
   */
  async build(input: BuildInput, by: Principal): Promise<{ image: ImageView; created: boolean }> {
    try {
      this.checkBuildPolicy();
    } catch (err) {
      await rm(input.contextPath, { force: true });
      throw err;
    }
    const contentDigest = digestOf({ context: `sha256:${input.contextSha256}`, dockerfile: input.dockerfile, buildArgs: input.buildArgs });
    const hex = createHash('sha256').update(`${by.tenant}\n${contentDigest}`).digest('hex').slice(0, 24);
    const now = this.deps.now();
    const record: ImageRecord = {
      id: `img_${hex}`,
      tenant: by.tenant,
      name: input.name ?? null,
      status: 'building',
      contentDigest,
      contextBytes: input.contextBytes,
      dockerfile: input.dockerfile,
      buildArgs: input.buildArgs,
      // Random, not derived from the input: another tenant cannot guess it to build FROM it or lease it.
      engineRef: `sbx-built:${randomBytes(12).toString('hex')}`,
      engineImageId: null,
      sizeBytes: null,
      builder: actorOf(by),
      createdAt: now.toISOString(),
      finishedAt: null,
      deadlineAt: new Date(now.getTime() + this.deps.buildPolicy.timeoutSeconds * 1000 + DEADLINE_MARGIN_MS).toISOString(),
      error: null,
    };
    const existing = await this.deps.store.claim(record);
    if (existing) {
      const current = await this.settleStale(existing);
      if (current.status !== 'failed' || this.running.has(current.id)) {
        await rm(input.contextPath, { force: true });
        const named = await this.rename(current, input.name);
        return { image: toImageView(named), created: false };
      }
      // A failed build of the same input: built again, with a fresh event stream and egress log.
      await this.deps.store.clearEvents(record.id);
      await this.deps.egressLog.clear(record.id);
      await this.deps.store.put(record);
    }
    if (record.name !== null) await this.deps.store.setName(by.tenant, record.name, record.id);
    const run = this.run(record, input.contextPath, by).finally(() => this.running.delete(record.id));
    this.running.set(record.id, run);
    return { image: toImageView(record), created: true };
  }

  /** Resolves when the build of `id` running in this process ends (at once when none runs). */
  async settled(id: string): Promise<void> {
    await this.running.get(id);
  }

  private async run(record: ImageRecord, contextPath: string, by: Principal): Promise<void> {
    const { store, engine, buildPolicy, now } = this.deps;
    const append = (body: ImageEventBody): Promise<number> => store.appendEvent(record.id, body, now());
    let logs: Promise<unknown> = append({ type: 'started' });
    let done: ImageRecord;
    try {
      const network = await openBuildNetwork(this.deps.buildNetwork, buildPolicy.network, record.id);
      const { imageId } = await engine.build({
        context: createReadStream(contextPath),
        dockerfile: record.dockerfile,
        buildArgs: record.buildArgs,
        tag: record.engineRef,
        labels: { ...ownershipLabels(this.deps.ownership), [IMAGE_LABEL.image]: record.id, [IMAGE_LABEL.tenant]: record.tenant },
        network,
        cpus: buildPolicy.cpus,
        memoryBytes: buildPolicy.memoryBytes,
        timeoutMs: buildPolicy.timeoutSeconds * 1000,
        onLog: (text) => {
          logs = logs.then(() => append({ type: 'log', text }));
        },
      });
      const inspected = await engine.inspect(imageId);
      done = {
        ...record,
        status: 'ready',
        engineImageId: imageId,
        sizeBytes: inspected?.sizeBytes ?? null,
        finishedAt: now().toISOString(),
      };
    } catch (err) {
      const error =
        err instanceof AppError
          ? { code: err.code, message: err.message }
          : { code: 'image.build_failed', message: (err as Error).message };
      done = { ...record, status: 'failed', finishedAt: now().toISOString(), error };
    } finally {
      await rm(contextPath, { force: true });
      if (buildPolicy.network !== 'none') await closeBuildNetwork(this.deps.buildNetwork, record.id);
    }
    await logs.catch(() => undefined);
    // Deleted meanwhile: the tag it got is removed again, nothing is left half-made.
    if (!(await store.finish(done))) {
      if (done.status === 'ready') await engine.remove(done.engineRef).catch(() => undefined);
      return;
    }
    await append(
      done.status === 'ready' ? { type: 'succeeded', engineImageId: done.engineImageId! } : { type: 'failed', error: done.error! },
    );
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'image.build',
      target: `image:${record.id}`,
      beforeDigest: null,
      afterDigest: done.status === 'ready' ? record.contentDigest : null,
      details: {
        tenant: record.tenant,
        status: done.status,
        name: record.name,
        dockerfile: record.dockerfile,
        error: done.error,
        network: buildPolicy.network === 'none' ? 'none' : { allowlistDigest: allowlistDigest(buildPolicy.network.allow) },
      },
    });
    this.deps.log.info({ imageId: record.id, status: done.status }, 'image build ended');
  }

  /** A record still `building` past its deadline with no build of it running here: its process died; it is failed now. */
  private async settleStale(record: ImageRecord): Promise<ImageRecord> {
    if (record.status !== 'building' || this.running.has(record.id) || Date.parse(record.deadlineAt) > this.deps.now().getTime())
      return record;
    const failed: ImageRecord = {
      ...record,
      status: 'failed',
      finishedAt: this.deps.now().toISOString(),
      error: { code: 'image.build_failed', message: 'the build was interrupted (its control plane stopped)' },
    };
    if (await this.deps.store.finish(failed)) {
      await this.deps.store.appendEvent(record.id, { type: 'failed', error: failed.error! }, this.deps.now());
      // Its network helper exited at the deadline by itself (runtime/build-proxy.ts); its socket directory is left.
      await closeBuildNetwork(this.deps.buildNetwork, record.id);
    }
    return (await this.deps.store.get(record.id)) ?? failed;
  }

  private async rename(record: ImageRecord, name: string | undefined): Promise<ImageRecord> {
    if (name === undefined || name === record.name) return record;
    const named = { ...record, name };
    await this.deps.store.put(named);
    await this.deps.store.setName(record.tenant, name, record.id);
    return named;
  }

  /** `by`'s tenant's images, oldest first. */
  async list(by: Principal): Promise<ImageView[]> {
    const records = await this.deps.store.list(by.tenant);
    return (await Promise.all(records.map((r) => this.settleStale(r)))).map(toImageView);
  }

  /** Image `id` when `by` may see it. Throws `image.not_found` (also for another tenant's). */
  async get(id: string, by: Principal): Promise<ImageRecord> {
    const record = await this.deps.store.get(id);
    if (!record || !seesTenant(by, record.tenant)) throw new AppError('image.not_found', `no image ${id}`, { details: { imageId: id } });
    return this.settleStale(record);
  }

  /**
   * Deletes image `id` (its engine tag and its record). Throws `image.not_found`, `image.in_use`
   * (409: a sandbox runs from it, or it is still being built).
   */
  async remove(id: string, by: Principal): Promise<void> {
    const record = await this.get(id, by);
    if (record.status === 'building')
      throw new AppError('image.in_use', `image ${id} is still being built`, { details: { imageId: id, status: 'building' } });
    if (record.engineImageId !== null) {
      const leases = await this.deps.engine.usedBy(record.engineImageId, this.deps.ownership);
      if (leases.length > 0)
        throw new AppError('image.in_use', `image ${id} is used by sandbox ${leases.join(', ')}: release it first`, {
          details: { imageId: id, leases },
        });
      await this.deps.engine.remove(record.engineRef);
    }
    await this.deps.store.delete(record);
    await this.deps.egressLog.clear(id);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'image.delete',
      target: `image:${id}`,
      beforeDigest: record.contentDigest,
      afterDigest: null,
      details: { tenant: record.tenant },
    });
  }
}

/** The registry digest of `ref`'s repository among an image's `RepoDigests`, else the first one, else null. */
function repoDigest(ref: ImageRef, repoDigests: readonly string[]): string | null {
  const name = ref.registry === null ? ref.repository : `${ref.registry}/${ref.repository}`;
  const mine = repoDigests.find(
    (d) => d.startsWith(`${name}@`) || d.startsWith(`docker.io/${name}@`) || d.startsWith(`docker.io/library/${name}@`),
  );
  return mine ?? repoDigests[0] ?? null;
}
