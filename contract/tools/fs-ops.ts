/**
 * The tools that change or inspect the tree itself rather than a file's bytes: `remove`,
 * `move`, `make_dir` and `stat`. Same canonical-path rules as the other file tools (roots,
 * symlinks, `input.path_outside_workspace`); each is one operation of the tool-user worker.
 */
import { z } from 'zod';
import { SandboxPath } from './common.js';
import { fileToolSpec, type ToolSpec } from './spec.js';

/**
 * `remove`: deletes a file, a symlink (the link, never its target) or a directory (`recursive`
 * for one with entries, else `files.not_empty`). A missing path succeeds with `existed: false`.
 * A file root itself is `files.root_protected`.
 */
export const RemoveArgs = z
  .object({
    path: SandboxPath,
    /** Remove a directory with everything under it. */
    recursive: z.boolean().default(false),
  })
  .strict();
export type RemoveArgs = z.infer<typeof RemoveArgs>;

/**
 * `move`: renames `path` to `destination` (rename(2): atomic within a filesystem, across
 * directories too; across filesystems copied and then removed). A symlink is moved as the link.
 * An existing destination is `files.exists` unless `overwrite` (a file or an empty directory
 * is then replaced; a directory with entries stays `files.not_empty`).
 */
export const MoveArgs = z
  .object({
    path: SandboxPath,
    destination: SandboxPath,
    overwrite: z.boolean().default(false),
  })
  .strict();
export type MoveArgs = z.infer<typeof MoveArgs>;

/** `make_dir`: creates a directory (with missing parents unless `parents: false`); an existing directory succeeds with `created: false`. */
export const MakeDirArgs = z
  .object({
    path: SandboxPath,
    /** Create missing parent directories too (mkdir -p). */
    parents: z.boolean().default(true),
    /** Permission bits of the directories created (before the umask 022), default 0755. */
    mode: z.number().int().min(0).max(0o7777).optional(),
  })
  .strict();
export type MakeDirArgs = z.infer<typeof MakeDirArgs>;

/**
 * `stat`: type, size, mode, owner and group (ids and names), mtime and, for a symlink, its
 * target. The last component is not followed (lstat); the directory it is in must resolve
 * inside the roots.
 */
export const StatArgs = z.object({ path: SandboxPath }).strict();
export type StatArgs = z.infer<typeof StatArgs>;

export const removeSpec = fileToolSpec({
  name: 'remove',
  description: 'Removes a file, symlink or directory (recursive for a non-empty one); a missing path succeeds with existed: false.',
  args: RemoveArgs,
  effectClasses: ['fs.read', 'fs.write'],
});

export const moveSpec: ToolSpec<MoveArgs, 'move'> = {
  name: 'move',
  version: '1',
  description: 'Moves or renames a file, symlink or directory, across directories; refuses to replace an existing target unless overwrite.',
  args: MoveArgs,
  effectClasses: ['fs.read', 'fs.write'],
  limits: 'files',
  // Both ends change: the source disappears, the destination appears or is replaced.
  accesses: (args) => [
    { kind: 'path', path: args.path, mode: 'write' },
    { kind: 'path', path: args.destination, mode: 'write' },
  ],
};

export const makeDirSpec = fileToolSpec({
  name: 'make_dir',
  description: 'Creates a directory, with missing parents by default; an existing directory succeeds with created: false.',
  args: MakeDirArgs,
  effectClasses: ['fs.read', 'fs.write'],
});

export const statSpec = fileToolSpec({
  name: 'stat',
  description: 'Type, size, mode, owner and group names, mtime and symlink target of a path (the link itself, not followed).',
  args: StatArgs,
  effectClasses: ['fs.read'],
});
