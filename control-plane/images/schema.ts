/** Schemas of the images domain: the build policy (a setting), the image record and view, build events, route inputs. */
import { isIP } from 'node:net';
import { z } from 'zod';
import { ImageEvent, ImageId, ImageView } from '../../contract/images.js';
import { Timestamp } from '../../contract/objects.js';
import { EgressRuleSchema, HOST_PATTERN } from '../egress/schema.js';

export { ImageEvent, ImageId, ImageView };

/**
 * A host a build may reach, written short: `deb.example.org` (ports 80 and 443) or
 * `deb.example.org:8080` (that port). Becomes a host rule of the egress allowlist.
 */
const HostShorthand = z
  .string()
  .max(259)
  .transform((text, ctx) => {
    const match = /^([^:]+)(?::(\d{1,5}))?$/.exec(text);
    const port = match?.[2] === undefined ? undefined : Number(match[2]);
    if (!match || !HOST_PATTERN.test(match[1]!) || isIP(match[1]!) !== 0 || (port !== undefined && (port < 1 || port > 65535))) {
      ctx.addIssue({
        code: 'custom',
        message: 'a lower-case DNS name (or *.suffix), optionally :port; use {"cidr", "ports"} for addresses',
      });
      return z.NEVER;
    }
    return { host: match[1]!, ports: port === undefined ? [80, 443] : [port] };
  });

/**
 * The network of a build's RUN steps. `none`: loopback only. `{allow: rules}`: loopback only as
 * well, plus an HTTP(S) proxy on loopback (`HTTP_PROXY`, `HTTPS_PROXY`, lower-case too, passed as
 * the predefined build args) that is the control plane's egress proxy: exactly the hosts and
 * ports the rules allow (the same rules and semantics as a policy's `network.allow`: `{host,
 * ports}`, `{cidr, ports}`, or the shorthand `host[:port]`), each connection in the build's
 * egress log (`GET /v1/images/:id/egress`). A name that resolves to a loopback, private or
 * otherwise non-public address also needs a `cidr` rule containing it.
 */
export const BuildNetwork = z.union([
  z.literal('none'),
  z
    .object({
      allow: z
        .array(z.union([HostShorthand, EgressRuleSchema]))
        .min(1)
        .max(1000),
    })
    .strict(),
]);
export type BuildNetwork = z.infer<typeof BuildNetwork>;

/**
 * The admin build policy (`SBX_IMAGE_BUILD_POLICY`, JSON). `network`: what the build's RUN steps
 * reach (`BuildNetwork`; default `none`). `cpus` and `memoryBytes` limit each build step;
 * `timeoutSeconds` the whole build; `maxContextBytes` the uploaded context.
 */
export const BuildPolicy = z
  .object({
    network: BuildNetwork.default('none'),
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
