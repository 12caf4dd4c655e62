/**
 * Built images on the wire (`POST /v1/images`, `GET /v1/images[/:id]`, the build's event
 * stream): shared by the control plane's images domain and the SDK.
 */
import { z } from 'zod';
import { Digest, Timestamp } from './objects.js';

/** An image id: `img_` and 24 hex characters of its content digest (with its tenant). */
export const ImageId = z.string().regex(/^img_[0-9a-f]{24}$/, 'img_ and 24 hex characters');

/** `building` → `ready` or `failed`. */
export const ImageStatus = z.enum(['building', 'ready', 'failed']);

/** A built image as clients see it. */
export const ImageView = z.object({
  id: ImageId,
  tenant: z.string(),
  /** The tenant's own name for it (a lease may name it so), or null. */
  name: z.string().nullable(),
  status: ImageStatus,
  /** sha256 of the context tar, the Dockerfile path and the build args (canonical JSON): the same input is the same image. */
  contentDigest: Digest,
  contextBytes: z.number().int().nonnegative(),
  dockerfile: z.string(),
  buildArgs: z.record(z.string(), z.string()),
  /** The engine's image id (`sha256:…`) once built. */
  engineImageId: z.string().nullable(),
  sizeBytes: z.number().int().nonnegative().nullable(),
  /** Who built it: the API key (id, role, tenant), as the audit log records it. */
  builder: z.union([z.object({ keyId: z.string(), role: z.enum(['admin', 'approver', 'user']), tenant: z.string() }), z.literal('system')]),
  createdAt: Timestamp,
  finishedAt: Timestamp.nullable(),
  /** Why the build failed (`image.build_failed`: the builder's message). */
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
});
export type ImageView = z.infer<typeof ImageView>;

/**
 * One step of a build, as `GET /v1/images/:id/events` streams them (`seq` from 1, gap-free):
 * `started`, `log` (a chunk of the builder's output in `text`), and one terminal event,
 * `succeeded` (`engineImageId`) or `failed` (`error.message` is the builder's).
 */
export const ImageEvent = z.object({
  seq: z.number().int().positive(),
  at: Timestamp,
  type: z.enum(['started', 'log', 'succeeded', 'failed']),
  text: z.string().optional(),
  engineImageId: z.string().optional(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
});
export type ImageEvent = z.infer<typeof ImageEvent>;
