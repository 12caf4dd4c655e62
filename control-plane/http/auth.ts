/**
 * Bearer API-key authentication for `/v1/*`. Keys are compared as sha256 digests with
 * `timingSafeEqual`, so the comparison takes the same time whatever the key.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../../contract/errors.js';

export function installApiKeyAuth(app: FastifyInstance, apiKey: string): void {
  const expected = createHash('sha256').update(apiKey).digest();
  app.addHook('onRequest', async (request) => {
    if (!request.url.startsWith('/v1/')) return;
    const header = request.headers.authorization;
    if (!header) throw new AppError('auth.missing_api_key', 'send Authorization: Bearer <api key>');
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    const given = createHash('sha256').update(match?.[1] ?? '').digest();
    if (!match || !timingSafeEqual(given, expected)) throw new AppError('auth.invalid_api_key', 'the API key is not valid');
  });
}
