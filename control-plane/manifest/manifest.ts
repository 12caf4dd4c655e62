/**
 * Builds the EnvironmentManifest of a lease: what the sandbox *is*, content-addressed.
 * `digest` = sha256 of the RFC 8785 canonical JSON of every other field, so two sandboxes with
 * the same image, facts, policy and env have the same digest whatever the key order.
 */
import { digestOf } from '../../contract/digest.js';
import type { EnvironmentManifest, ImageRecord, PolicyRef, SandboxFacts, WritableRootEntry } from '../../contract/objects.js';
import type { ImageConfig } from '../runtime/runtime.js';

export interface ManifestInput {
  facts: SandboxFacts;
  image: ImageRecord;
  engineVersion: string;
  ociRuntime: string;
  policy: PolicyRef;
  network: EnvironmentManifest['network'];
  /** Lease env; only its names and digest enter the manifest. */
  env: Record<string, string>;
  secretRefs: string[];
  /** The sandbox's writable roots (policy's and lease's), `fromImage` as the create found it. */
  writableRoots?: WritableRootEntry[];
  /** The snapshot the sandbox started from. */
  snapshot?: { id: string; digest: string; parentLeaseId: string } | null;
  /** The policy phase it starts in (a phased policy only). */
  phase?: string;
  createdAt: Date;
}

export function buildManifest(input: ManifestInput): EnvironmentManifest {
  const body: Omit<EnvironmentManifest, 'digest'> = {
    schemaVersion: 1,
    ...input.facts,
    image: input.image,
    runtime: { kind: 'docker', engineVersion: input.engineVersion, ociRuntime: input.ociRuntime },
    policy: input.policy,
    network: input.network,
    env: { keys: Object.keys(input.env).sort(), digest: digestOf(input.env) },
    secretRefs: [...input.secretRefs].sort(),
    snapshot: input.snapshot ?? null,
    writableRoots: input.writableRoots ?? [],
    ...(input.phase === undefined ? {} : { phase: input.phase }),
    createdAt: input.createdAt.toISOString(),
  };
  return { ...body, digest: digestOf(body) };
}

/** Recomputes a manifest's digest from its other fields; equal to `manifest.digest` when intact. */
export function manifestDigest(manifest: EnvironmentManifest): string {
  const { digest: _digest, ...body } = manifest;
  return digestOf(body);
}

/** The manifest's record of image `ref` as the engine has it (`Env` by names only: values may be credentials). */
export function imageRecord(ref: string, image: ImageConfig): ImageRecord {
  return {
    ref,
    id: image.id,
    repoDigests: [...image.repoDigests].sort(),
    config: {
      envKeys: Object.keys(image.env).sort(),
      workingDir: image.workingDir,
      user: image.user,
      labels: image.labels,
      entrypoint: image.entrypoint,
      cmd: image.cmd,
    },
  };
}
