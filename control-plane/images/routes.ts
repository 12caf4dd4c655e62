/**
 * Image routes: `POST /v1/images` (a build-context tar as the body; `dockerfile`, `buildArgs`,
 * `name` in the query) builds under the admin build policy; `GET /v1/images`, `GET
 * /v1/images/:id`, `DELETE /v1/images/:id`; `GET /v1/images/:id/events` streams the build's
 * events as Server-Sent Events with `Last-Event-ID` resume (http/sse.ts, as call events do);
 * `GET /v1/images/:id/egress` is the build's egress log (build policy network `{allow}`).
 *
 * The context is spooled to disk under the size limit (a declared `Content-Length` over it is
 * refused before a byte is read), hashed, and checked whole (files/tar-guard.ts: a tar, no
 * absolute or `..` names, no link out of it) before the engine sees it.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { AppError } from '../../contract/errors.js';
import { EgressQuery, readEgress } from '../egress/routes.js';
import type { EgressLog } from '../egress/store.js';
import { guardArchive, readArchiveFile } from '../files/tar-guard.js';
import { streamSse } from '../http/sse.js';
import type { Notifier } from '../redis/notifier.js';
import { BuildQuery, ImageEventsHeaders, ImageParams, toImageView } from './schema.js';
import type { ImageService } from './service.js';
import type { ImageStore } from './store.js';

export interface ImagesRoutesOptions {
  images: ImageService;
  store: Pick<ImageStore, 'notifyChannel' | 'readEvents' | 'get'>;
  notifier: Pick<Notifier, 'next'>;
  /** Directory for spooled build contexts. */
  spoolDir: string;
  /** Largest build context, bytes (the build policy's `maxContextBytes`). */
  maxContextBytes: number;
  /** The builds' egress logs (build policy network `{allow}`), by image id. */
  egressLog: Pick<EgressLog, 'read'>;
}

/** Largest Dockerfile read for its base images, bytes. */
const MAX_DOCKERFILE_BYTES = 1024 * 1024;

export const imagesRoutes: FastifyPluginAsync<ImagesRoutesOptions> = async (plugin, opts) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['images'];
  const { images } = opts;
  // Any body that is not JSON is taken as the context archive; a wrong one is refused by the tar guard.
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

  const buildSchema = {
    tags,
    summary: 'Build an image from a context tar',
    description:
      'The body is a tar of the build context (any Content-Type). `202` with the image (`status: building`) when a build starts; `200` with the existing image when the same context, Dockerfile path and build args were built before (no rebuild). Follow `GET /v1/images/:id/events` to its terminal `succeeded` or `failed` event. Refused: not a tar or unsafe entries (`files.invalid_archive`, `files.unsafe_entry`), no Dockerfile (`image.dockerfile_not_found`), a base image (`FROM`, `COPY --from`) that a lease could not use (`image.registry_not_allowed`, `image.not_found`, `image.invalid_reference`), over the size limit (`input.body_too_large`), a build policy with network hosts on an engine that is not on this host (`policy.unenforceable`); with the Kubernetes driver, any build (`501 runtime.unsupported`: push images to a registry the nodes pull from).',
    querystring: BuildQuery,
  };
  app.post('/v1/images', { schema: buildSchema, bodyLimit: opts.maxContextBytes }, async (request, reply) => {
    images.checkBuildPolicy();
    const declared = Number(request.headers['content-length'] ?? 0);
    if (declared > opts.maxContextBytes) throw tooLarge(opts.maxContextBytes);
    if (!request.body || typeof (request.body as Readable).pipe !== 'function')
      throw new AppError('input.unsupported_media_type', 'send the build context as a tar body (Content-Type: application/x-tar)');
    await mkdir(opts.spoolDir, { recursive: true, mode: 0o700 });
    const raw = join(opts.spoolDir, `image-${randomUUID()}.tar`);
    const guarded = `${raw}.guarded`;
    let handedOver = false;
    try {
      const hash = createHash('sha256');
      let bytes = 0;
      const count = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          bytes += chunk.length;
          if (bytes > opts.maxContextBytes) return cb(tooLarge(opts.maxContextBytes));
          hash.update(chunk);
          cb(null, chunk);
        },
      });
      await pipeline(request.body as Readable, count, createWriteStream(raw));
      const files = new Set<string>();
      await guardArchive(raw, guarded, { uid: 0, gid: 0, uname: 'root', gname: 'root' }, (name, type) => {
        if (type === 'file' || type === 'contiguous-file') files.add(name);
      });
      const { dockerfile, buildArgs, name } = request.query;
      const dockerfileName = dockerfile
        .split('/')
        .filter((p) => p !== '' && p !== '.')
        .join('/');
      const text = files.has(dockerfileName) ? await readArchiveFile(guarded, dockerfileName, MAX_DOCKERFILE_BYTES) : null;
      if (text === null)
        throw new AppError('image.dockerfile_not_found', `the build context has no file ${dockerfile}`, {
          details: { field: 'dockerfile', dockerfile },
        });
      // Every base is checked (and pulled from an allowlisted registry) before the builder sees it.
      await images.checkBases(text.toString('utf8'), buildArgs, request.principal.tenant);
      handedOver = true;
      const { image, created } = await images.build(
        { contextPath: guarded, contextBytes: bytes, contextSha256: hash.digest('hex'), dockerfile, buildArgs, name },
        request.principal,
      );
      return reply.status(created ? 202 : 200).send(image);
    } finally {
      await rm(raw, { force: true });
      if (!handedOver) await rm(guarded, { force: true });
    }
  });

  app.get('/v1/images', { schema: { tags, summary: "The caller's tenant's images" } }, async (request) => ({
    images: await images.list(request.principal),
  }));

  app.get('/v1/images/:id', { schema: { tags, summary: 'Read an image', params: ImageParams } }, async (request) =>
    toImageView(await images.get(request.params.id, request.principal)),
  );

  const deleteSchema = {
    tags,
    summary: 'Delete an image',
    description: '`204`; `409 image.in_use` while a sandbox runs from it or it is being built.',
    params: ImageParams,
  };
  app.delete('/v1/images/:id', { schema: deleteSchema }, async (request, reply) => {
    await images.remove(request.params.id, request.principal);
    return reply.status(204).send();
  });

  const eventsSchema = {
    tags,
    summary: "An image build's events as Server-Sent Events",
    description:
      "`id:` is the gap-free `seq`; reconnect with `Last-Event-ID` to receive every later event exactly once. Types: `started`, `log` (`text`), then `succeeded` (`engineImageId`) or `failed` (`error.message`: the builder's); the stream ends after either.",
    params: ImageParams,
    headers: ImageEventsHeaders,
  };
  const egressSchema = {
    tags,
    summary: "The build's egress log, oldest first",
    description:
      "Every connection the build's RUN steps asked the egress proxy for (build policy network `{allow}`), allowed or denied, with the rule that decided and the bytes moved; empty for network `none`. Filters as `GET /v1/sandboxes/:id/egress`.",
    params: ImageParams,
    querystring: EgressQuery,
  };
  app.get('/v1/images/:id/egress', { schema: egressSchema }, async (request) => {
    await images.get(request.params.id, request.principal);
    return readEgress(opts.egressLog, request.params.id, request.query);
  });

  app.get('/v1/images/:id/events', { schema: eventsSchema }, async (request, reply) => {
    const { id } = request.params;
    await images.get(id, request.principal);
    await streamSse(
      request,
      reply,
      opts.notifier,
      {
        channel: opts.store.notifyChannel(id),
        read: (seq) => opts.store.readEvents(id, seq),
        isTerminal: (event) => event.type === 'succeeded' || event.type === 'failed',
        ended: async () => (await opts.store.get(id))?.status !== 'building',
      },
      request.headers['last-event-id'] ?? 0,
    );
  });
};

function tooLarge(maxBytes: number): AppError {
  return new AppError('input.body_too_large', `the build context exceeds ${maxBytes} bytes`, { details: { maxBytes } });
}
