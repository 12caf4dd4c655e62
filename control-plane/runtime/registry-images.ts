/**
 * Image configs read from a registry over the Docker Registry HTTP API v2 (the OCI Distribution
 * Specification): what the Kubernetes driver knows of an image, since a cluster has no API that
 * shows one. A manifest by tag or digest (an index or manifest list is resolved to this
 * machine's platform), then its config blob. Anonymous reads only: a registry that asks for a
 * token answers `image.pull_failed` naming that.
 *
 * Each answer carries the manifest's digest (the sha256 of its bytes), so the driver can run
 * exactly the image it read (`repo@sha256:…`), never what a moved tag points at later. An index
 * is resolved to the platform `arch` (the nodes'; default this machine's).
 */
import { createHash } from 'node:crypto';
import { AppError } from '../../contract/errors.js';
import type { ImageConfig } from './runtime.js';

const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');
const INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json']);
/** How long one registry request may take, ms. */
const REQUEST_TIMEOUT_MS = 15_000;

/** A reference split into the parts the registry API names. */
export interface RegistryRef {
  /** `host[:port]`. */
  registry: string;
  repository: string;
  /** A tag or a `sha256:…` digest. */
  reference: string;
}

/**
 * Splits `ref` (`registry/repository[:tag][@digest]`). Throws AppError `image.invalid_reference`
 * for one without a registry host: a cluster pulls by full reference, and the driver reads what
 * the nodes will pull.
 */
export function parseRegistryRef(ref: string): RegistryRef {
  const slash = ref.indexOf('/');
  const host = slash < 0 ? '' : ref.slice(0, slash);
  if (slash < 0 || !(host.includes('.') || host.includes(':') || host === 'localhost'))
    throw new AppError('image.invalid_reference', `image ${ref} names no registry: the Kubernetes driver runs images by full reference`, {
      details: { field: 'image', image: ref },
    });
  let rest = ref.slice(slash + 1);
  let reference = 'latest';
  const at = rest.indexOf('@');
  // A digest wins over a tag (`repo:tag@sha256:…` names the digest; the tag is a label for people).
  if (at >= 0) {
    reference = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  const colon = rest.lastIndexOf(':');
  if (colon >= 0) {
    if (at < 0) reference = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  return { registry: host, repository: rest, reference };
}

export interface RegistryImagesOptions {
  /** Registries (`host:port`) spoken to over plain HTTP, such as a lab's; every other over HTTPS. */
  plainHttp: ReadonlySet<string>;
}

/** Reads image configs from registries; one instance per control plane. */
export class RegistryImages {
  constructor(private readonly options: RegistryImagesOptions) {}

  /**
   * The config of image `ref` and its pinned reference (`registry/repository@sha256:…`). Throws
   * AppError `image.invalid_reference`, `image.not_found` (the registry has no such manifest),
   * `image.pull_failed` (the registry did not answer, refused, or asks for credentials).
   */
  async inspect(ref: string, arch = process.arch === 'x64' ? 'amd64' : process.arch): Promise<{ config: ImageConfig; pinned: string }> {
    const parsed = parseRegistryRef(ref);
    let { body, type, digest } = await this.manifest(parsed, parsed.reference, ref);
    if (INDEX_TYPES.has(type)) {
      const entry = platformEntry(body, ref, arch);
      ({ body, type, digest } = await this.manifest(parsed, entry, ref));
    }
    const configDigest = (body as { config?: { digest?: unknown } }).config?.digest;
    if (typeof configDigest !== 'string') throw pullFailed(ref, `manifest of type ${type} has no config`);
    const blob = await this.get(parsed, `blobs/${configDigest}`, 'application/json', ref);
    const image = (jsonOf(Buffer.from(await blob.arrayBuffer()), ref, 'config') as { config?: Record<string, unknown> }).config ?? {};
    const env: Record<string, string> = {};
    for (const entry of stringArray(image.Env) ?? []) {
      const eq = entry.indexOf('=');
      if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
    }
    const repo = `${parsed.registry}/${parsed.repository}`;
    const config: ImageConfig = {
      id: configDigest,
      env,
      workingDir: typeof image.WorkingDir === 'string' && image.WorkingDir !== '' ? image.WorkingDir : null,
      user: typeof image.User === 'string' && image.User !== '' ? image.User : null,
      labels: Object.fromEntries(Object.entries((image.Labels as Record<string, unknown> | null) ?? {}).map(([k, v]) => [k, String(v)])),
      entrypoint: stringArray(image.Entrypoint),
      cmd: stringArray(image.Cmd),
      repoDigests: [`${repo}@${digest}`],
    };
    return { config, pinned: `${repo}@${digest}` };
  }

  /**
   * A manifest and its digest, the sha256 of the bytes received (what a digest reference names):
   * a registry's header is not taken on trust, and one asked for by digest must match it.
   */
  private async manifest(ref: RegistryRef, reference: string, asked: string): Promise<{ body: unknown; type: string; digest: string }> {
    const res = await this.get(ref, `manifests/${reference}`, MANIFEST_TYPES, asked);
    const bytes = Buffer.from(await res.arrayBuffer());
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    if (reference.startsWith('sha256:') && reference !== digest)
      throw pullFailed(asked, `the registry answered ${digest} for ${reference}`);
    const body = jsonOf(bytes, asked, 'manifest');
    const header = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
    const mediaType = (body as { mediaType?: unknown }).mediaType;
    return { body, type: typeof mediaType === 'string' ? mediaType : header, digest };
  }

  private async get(ref: RegistryRef, path: string, accept: string, asked: string): Promise<Response> {
    const scheme = this.options.plainHttp.has(ref.registry) ? 'http' : 'https';
    let res: Response;
    try {
      res = await fetch(`${scheme}://${ref.registry}/v2/${ref.repository}/${path}`, {
        headers: { accept },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (err) {
      throw pullFailed(asked, `registry ${ref.registry} did not answer: ${(err as Error).message}`, err);
    }
    if (res.ok) return res;
    await res.body?.cancel();
    if (res.status === 404)
      throw new AppError('image.not_found', `registry ${ref.registry} has no image ${asked}`, { details: { image: asked } });
    if (res.status === 401 || res.status === 403)
      throw pullFailed(asked, `registry ${ref.registry} asks for credentials, which sbx does not send`);
    throw pullFailed(asked, `registry ${ref.registry} answered ${res.status}`);
  }
}

/** The digest of the manifest for linux/`arch` (the nodes' architecture, Kubernetes' naming) in an index. */
function platformEntry(index: unknown, ref: string, arch: string): string {
  const manifests =
    (index as { manifests?: Array<{ digest?: string; platform?: { os?: string; architecture?: string } }> }).manifests ?? [];
  const entry = manifests.find((m) => m.platform?.os === 'linux' && m.platform.architecture === arch);
  if (typeof entry?.digest !== 'string')
    throw new AppError('image.not_found', `image ${ref} has no linux/${arch} manifest`, { details: { image: ref } });
  return entry.digest;
}

/** `bytes` as JSON; throws `image.pull_failed` naming `what` when they are not. */
function jsonOf(bytes: Buffer, image: string, what: string): unknown {
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    throw pullFailed(image, `the registry's ${what} is not JSON`);
  }
}

function stringArray(value: unknown): string[] | null {
  return Array.isArray(value) && value.every((v) => typeof v === 'string') ? value : null;
}

function pullFailed(image: string, message: string, cause?: unknown): AppError {
  return new AppError('image.pull_failed', `image ${image}: ${message}`, { details: { image }, ...(cause === undefined ? {} : { cause }) });
}
