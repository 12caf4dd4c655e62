/** `read_file`: a window of lines of a text file, or a binary file as base64. */
import { z } from 'zod';
import { SandboxPath } from './common.js';
import { fileToolSpec } from './spec.js';

export const ReadFileArgs = z
  .object({
    path: SandboxPath,
    /** First line to return, 1-based. */
    offset: z.number().int().min(1).default(1),
    /** Lines to return at most. */
    limit: z.number().int().min(1).max(100_000).default(2000),
    /** `text` refuses binary files (`files.binary`); `base64` returns any file's bytes. */
    encoding: z.enum(['text', 'base64']).default('text'),
  })
  .strict();
export type ReadFileArgs = z.infer<typeof ReadFileArgs>;

export const readFileSpec = fileToolSpec({
  name: 'read_file',
  description: 'Reads a window of lines of a text file (or a binary file as base64), with the sha256 of the whole file.',
  args: ReadFileArgs,
  effectClasses: ['fs.read'],
});
