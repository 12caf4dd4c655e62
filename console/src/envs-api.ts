/**
 * Schemas of the answers the images, snapshots and volumes pages show (the fields they show; the
 * wire contract is contract/images.ts, contract/snapshots.ts, contract/volumes.ts).
 */
import * as z from 'zod/mini';
import { Lease } from './api.js';

/** A built image (`GET /v1/images`, contract `ImageView`). */
export const ImageView = z.object({
  id: z.string(),
  name: z.nullable(z.string()),
  status: z.string(),
  sizeBytes: z.nullable(z.number()),
  contextBytes: z.number(),
  dockerfile: z.string(),
  createdAt: z.string(),
  finishedAt: z.nullable(z.string()),
  error: z.nullable(z.object({ code: z.string(), message: z.string() })),
});
export type ImageView = z.infer<typeof ImageView>;
export const ImageList = z.object({ images: z.array(ImageView) });

/** One build event as `GET /v1/images/:id/events` streams it (the `data:` line). */
export const ImageEvent = z.object({
  seq: z.number(),
  type: z.string(),
  text: z.optional(z.string()),
  error: z.optional(z.object({ code: z.string(), message: z.string() })),
});

/** A snapshot (`GET /v1/snapshots`, contract `Snapshot`). */
export const Snapshot = z.object({
  id: z.string(),
  sizeBytes: z.number(),
  parentLeaseId: z.string(),
  policy: z.object({ name: z.string(), version: z.number() }),
  sourceImage: z.string(),
  roots: z.array(z.object({ path: z.string() })),
  consistent: z.boolean(),
  createdAt: z.string(),
  expiresAt: z.string(),
});
export type Snapshot = z.infer<typeof Snapshot>;
export const SnapshotList = z.object({ snapshots: z.array(Snapshot) });
/** `POST /v1/snapshots/:id/fork`. */
export const ForkAnswer = z.object({ sandboxes: z.array(Lease) });

/** A volume (contract `Volume`); `mounts` only in `GET /v1/volumes/:name`. */
export const Volume = z.object({
  name: z.string(),
  sizeBytes: z.number(),
  shared: z.boolean(),
  state: z.string(),
  createdAt: z.string(),
  mounts: z.optional(z.array(z.object({ leaseId: z.string(), readOnly: z.boolean() }))),
});
export type Volume = z.infer<typeof Volume>;
/** `GET /v1/volumes`: the tenant's volumes, the bytes they take and its limit (null: none). */
export const VolumeList = z.object({ volumes: z.array(Volume), usedBytes: z.number(), limitBytes: z.nullable(z.number()) });
