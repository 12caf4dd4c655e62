/**
 * `git_status` and `git_diff`. git runs commands a repository's own config and attributes name
 * (filters), so both count as running code (effect class `process`).
 */
import { z } from 'zod';
import { SandboxPath } from './common.js';
import { fileToolSpec } from './spec.js';

/** `git_status`: the work tree's state from `git status --porcelain=v2 -z --branch`. */
export const GitStatusArgs = z.object({ path: SandboxPath.default('/workspace') }).strict();
export type GitStatusArgs = z.infer<typeof GitStatusArgs>;

/** `git_diff`: the unified diff of the work tree (or the index with `staged`). */
export const GitDiffArgs = z
  .object({
    path: SandboxPath.default('/workspace'),
    staged: z.boolean().default(false),
    /** Bytes of diff returned in the result; the rest is counted. */
    maxBytes: z
      .number()
      .int()
      .min(1024)
      .max(16 * 1024 * 1024)
      .default(256 * 1024),
  })
  .strict();
export type GitDiffArgs = z.infer<typeof GitDiffArgs>;

export const gitStatusSpec = fileToolSpec({
  name: 'git_status',
  description: 'The work tree state from git status --porcelain=v2: staged, unstaged, untracked, conflicted.',
  args: GitStatusArgs,
  effectClasses: ['fs.read', 'process'],
});

export const gitDiffSpec = fileToolSpec({
  name: 'git_diff',
  description: 'The unified diff of the work tree or the index, bounded.',
  args: GitDiffArgs,
  effectClasses: ['fs.read', 'process'],
});
