/** `write_file`: replaces or creates a file atomically (temp file, fsync, rename). */
import { z } from 'zod';
import { SandboxPath, Sha256Hex } from './common.js';
import { fileToolSpec } from './spec.js';

export const WriteFileArgs = z
  .object({
    path: SandboxPath,
    content: z.string().max(32 * 1024 * 1024),
    /** How `content` is encoded. */
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    /** Compare-and-swap: the sha256 the file must have now; a mismatch is `files.conflict` and nothing is written. */
    expectedSha256: Sha256Hex.optional(),
    /** Fail with `files.exists` if the file exists. */
    createOnly: z.boolean().default(false),
    /** Permission bits for a new file (default 0644); an existing file keeps its own. Missing parent directories are created. */
    mode: z.number().int().min(0).max(0o777).optional(),
  })
  .strict()
  .refine((a) => a.encoding !== 'base64' || (/^[A-Za-z0-9+/]*={0,2}$/.test(a.content) && a.content.length % 4 === 0), {
    message: 'not valid base64 (RFC 4648 alphabet, padded)',
    path: ['content'],
  });
export type WriteFileArgs = z.infer<typeof WriteFileArgs>;

export const writeFileSpec = fileToolSpec({
  name: 'write_file',
  description: 'Writes a file atomically; expectedSha256 makes it a compare-and-swap, createOnly refuses to replace.',
  args: WriteFileArgs,
  effectClasses: ['fs.read', 'fs.write'],
});
