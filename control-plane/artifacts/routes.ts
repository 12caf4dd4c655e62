/**
 * `GET /v1/sandboxes/:id/artifacts/:artifactId`: the artifact's bytes, with its sha256 in
 * `x-sbx-sha256` (hex) and `digest: sha-256=<base64>` (RFC 3230), its metadata as JSON in
 * `x-sbx-artifact`. Artifacts stay readable after their sandbox is released, for the retention.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ArtifactId } from '../../contract/queue.js';
import type { ArtifactStore } from './store.js';

const Params = z.object({ id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/), artifactId: ArtifactId });

export const artifactsRoutes: FastifyPluginAsync<{ artifacts: ArtifactStore }> = async (plugin, { artifacts }) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const schema = {
    tags: ['calls'],
    summary: "An artifact's bytes",
    description: 'With `x-sbx-sha256`, `digest: sha-256=…` and the metadata in `x-sbx-artifact`.',
    params: Params,
  };
  app.get('/v1/sandboxes/:id/artifacts/:artifactId', { schema, config: { lease: 'visible' } }, async (request, reply) => {
    const { id, artifactId } = request.params;
    const { artifact, stream } = await artifacts.open(id, artifactId);
    return reply
      .type(artifact.mediaType)
      .header('content-length', artifact.size)
      .header('x-sbx-sha256', artifact.sha256)
      .header('digest', `sha-256=${Buffer.from(artifact.sha256, 'hex').toString('base64')}`)
      .header('x-sbx-artifact', JSON.stringify(artifact))
      .send(stream);
  });
};
