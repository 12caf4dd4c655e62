/** HTTP schemas of the secrets domain. Values come in; only metadata goes out. */
import { z } from 'zod';
import { SECRET_MAX_BYTES, SecretName } from '../../contract/secrets.js';

export const SecretParams = z.object({ name: SecretName }).strict();

/**
 * `PUT /v1/secrets/:name` body. The value is text (UTF-8), 1 byte to 64 KiB, without NUL
 * (an environment string cannot hold one, execve(2)).
 */
export const PutSecretBody = z
  .object({
    value: z
      .string()
      .min(1, 'must not be empty')
      .refine((v) => !v.includes('\0'), 'must not contain NUL')
      .refine((v) => Buffer.byteLength(v, 'utf8') <= SECRET_MAX_BYTES, `must be at most ${SECRET_MAX_BYTES} bytes (UTF-8)`),
  })
  .strict()
  .meta({ examples: [{ value: 'npm_0123456789abcdef' }] });
export type PutSecretBody = z.infer<typeof PutSecretBody>;
