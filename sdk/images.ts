/**
 * `Image`: building and managing a tenant's images.
 *
 *   const image = await Image.build('./env', { dockerfile: 'Dockerfile', onLog: (t) => process.stdout.write(t) });
 *   await using sbx = await Sandbox.create({ image: image.id });
 */
import type { ImageView } from '../contract/images.js';
import type { EgressEvent } from '../contract/objects.js';
import type { BuildImageOptions } from './client.js';
import { SbxError } from './errors.js';
import { connect, type ConnectionOptions } from './sandbox.js';

export interface ImageBuildOptions extends BuildImageOptions, ConnectionOptions {
  /** Each chunk of the builder's output, in order. */
  onLog?: (text: string) => void;
}

export const Image = {
  /**
   * Builds an image from a local directory (or a tar's bytes) and resolves when it is `ready`;
   * the same files, Dockerfile path and build args return the image built before, without a
   * rebuild. Throws SbxError `image.build_failed` (the builder's message) when the build fails,
   * and what `POST /v1/images` refuses with (`files.invalid_archive`, `image.dockerfile_not_found`, ...).
   */
  async build(context: string | Uint8Array, options: ImageBuildOptions = {}): Promise<ImageView> {
    const { url, apiKey, fetch, onLog, ...build } = options;
    const client = connect({ url, apiKey, fetch });
    const { image } = await client.buildImage(context, build);
    if (image.status === 'building') {
      for await (const event of client.imageEvents(image.id)) {
        if (event.type === 'log' && event.text !== undefined) onLog?.(event.text);
      }
    }
    const done = await client.getImage(image.id);
    if (done.status !== 'ready')
      throw new SbxError({
        code: 'image.build_failed',
        domain: 'image',
        retryability: 'after_fix',
        message: done.error?.message ?? `image ${image.id} is ${done.status}`,
        details: { imageId: image.id },
      });
    return done;
  },

  /** The caller's tenant's images. */
  async list(options: ConnectionOptions = {}): Promise<ImageView[]> {
    return connect(options).listImages();
  },

  /** One image by id. Throws SbxError `image.not_found`. */
  async get(id: string, options: ConnectionOptions = {}): Promise<ImageView> {
    return connect(options).getImage(id);
  },

  /** The build's egress log (build policy network `{allow}`), oldest first. Throws SbxError `image.not_found`. */
  async egress(id: string, options: ConnectionOptions & { decision?: 'allowed' | 'denied' } = {}): Promise<EgressEvent[]> {
    const { decision, ...connection } = options;
    return connect(connection).imageEgress(id, decision ? { decision } : {});
  },

  /** Deletes an image. Throws SbxError `image.in_use` while a sandbox runs from it. */
  async remove(id: string, options: ConnectionOptions = {}): Promise<void> {
    await connect(options).deleteImage(id);
  },
};
