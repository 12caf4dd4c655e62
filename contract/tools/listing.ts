/** The tools that look at a tree without changing it: `list_files`, `glob`, `search`. */
import { z } from 'zod';
import { SandboxPath } from './common.js';
import { fileToolSpec } from './spec.js';

/** `list_files`: a bounded, sorted listing; symlinks are listed, never followed. */
export const ListFilesArgs = z
  .object({
    path: SandboxPath.default('/workspace'),
    /** Directory levels below `path`, 1 = its entries only. */
    depth: z.number().int().min(1).max(32).default(3),
    limit: z.number().int().min(1).max(20_000).default(1000),
  })
  .strict();
export type ListFilesArgs = z.infer<typeof ListFilesArgs>;

/** `glob`: paths under `path` matching a glob pattern (picomatch syntax), symlinks not followed. */
export const GlobArgs = z
  .object({
    pattern: z.string().min(1).max(1024),
    path: SandboxPath.default('/workspace'),
    limit: z.number().int().min(1).max(20_000).default(1000),
  })
  .strict();
export type GlobArgs = z.infer<typeof GlobArgs>;

/** `search`: content search with ripgrep (regex, or literal), bounded matches with file:line. */
export const SearchArgs = z
  .object({
    pattern: z.string().min(1).max(4096),
    path: SandboxPath.default('/workspace'),
    literal: z.boolean().default(false),
    ignoreCase: z.boolean().default(false),
    /** Only files matching this glob. */
    glob: z.string().max(1024).optional(),
    limit: z.number().int().min(1).max(10_000).default(200),
  })
  .strict();
export type SearchArgs = z.infer<typeof SearchArgs>;

export const listFilesSpec = fileToolSpec({
  name: 'list_files',
  description: 'Lists a directory tree, sorted and bounded; symlinks are listed, not followed.',
  args: ListFilesArgs,
  effectClasses: ['fs.read'],
});

export const globSpec = fileToolSpec({
  name: 'glob',
  description: 'Finds paths matching a glob pattern under a directory, bounded; symlinks are not followed.',
  args: GlobArgs,
  effectClasses: ['fs.read'],
});

export const searchSpec = fileToolSpec({
  name: 'search',
  description: 'Searches file contents with ripgrep (regex or literal), bounded matches with file and line.',
  args: SearchArgs,
  effectClasses: ['fs.read'],
});
