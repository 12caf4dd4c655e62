/** Schemas of the images domain: the build policy (a setting), the image record and view, build events, route inputs. */
import { z } from 'zod';
import { ImageEvent, ImageId, ImageView } from '../../contract/images.js';
import { Timestamp } from '../../contract/objects.js';

export { ImageEvent, ImageId, ImageView };

/**
 * The admin build policy (`SBX_IMAGE_BUILD_POLICY`, JSON). `network`: what the build's RUN steps
 * reach — `none` (loopback only; the default) or `{allow: [hosts]}` (refused today as
 * `policy.unenforceable`: the engine's classic builder has no per-build egress filter).
 * `cpus` and `memoryBytes` limit each build step; `timeoutSeconds` the whole build;
 * `maxContextBytes` the uploaded context.
 */
export const BuildPolicy = z
  .object({
    network: z.union([z.literal('none'), z.object({ allow: z.array(z.string().min(1)).min(1) }).strict()]).default('none'),
    cpus: z.number().positive().max(64).default(1),
    memoryBytes: z
      .number()
      .int()
      .min(64 * 1024 * 1024)
      .default(2 * 1024 * 1024 * 1024),
    timeoutSeconds: z.number().int().positive().default(600),
    maxContextBytes: z
      .number()
      .int()
      .positive()
      .default(512 * 1024 * 1024),
  })
  .strict();
export type BuildPolicy = z.infer<typeof BuildPolicy>;

/** A tenant's own name for a built image (`team/env:1`); never of the `img_…` form. */
export const ImageName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._/-]{0,127}(?::[\w][\w.-]{0,127})?$/, 'lower-case letters, digits, . _ / - and an optional :tag')
  .refine((n) => !ImageId.safeParse(n).success, 'names of the form img_<hex> are image ids');

/** A built image as stored: the view, and its tag on the engine (`sbx-built:<hex>`) and the time a build still `building` counts as failed (its process died). */
export const ImageRecord = ImageView.extend({ engineRef: z.string(), deadlineAt: Timestamp });
export type ImageRecord = z.infer<typeof ImageRecord>;

/** The record as clients see it. */
export function toImageView(r: ImageRecord): ImageView {
  const { engineRef: _ref, deadlineAt: _deadline, ...view } = r;
  return view;
}

export type ImageEventBody = Omit<ImageEvent, 'seq' | 'at'>;

export const ImageParams = z.object({ id: ImageId }).strict();

/** Dockerfile path inside the context: relative, no `..`, no NUL. */
const DockerfilePath = z
  .string()
  .min(1)
  .max(255)
  .refine((p) => !p.startsWith('/') && !p.split('/').includes('..') && !p.includes('\0'), 'a relative path inside the context');

/** `POST /v1/images` query: the Dockerfile's path in the context, build args as a JSON object, an optional name. */
export const BuildQuery = z
  .object({
    dockerfile: DockerfilePath.default('Dockerfile'),
    buildArgs: z
      .string()
      .max(64 * 1024)
      .optional()
      .transform((text, ctx) => {
        if (text === undefined) return {};
        try {
          return JSON.parse(text) as unknown;
        } catch {
          ctx.addIssue({ code: 'custom', message: 'buildArgs must be a JSON object of strings' });
          return z.NEVER;
        }
      })
      .pipe(z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/), z.string().max(4096))),
    name: ImageName.optional(),
  })
  .strict();

/** `GET /v1/images/:id/events` headers: `Last-Event-ID` resumes after that `seq`. */
export const ImageEventsHeaders = z.object({ 'last-event-id': z.coerce.number().int().nonnegative().optional() });
