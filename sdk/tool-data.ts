/**
 * The structured `data` of the file and git tools' results, as the SDK returns it. Parsed
 * loosely: fields a newer agent adds pass through.
 */
import { z } from 'zod';

/** `read_file`: a window of lines (text), or the whole file (`encoding: base64`). */
export const ReadFileData = z
  .object({
    /** Canonical path (symlinks resolved). */
    path: z.string(),
    encoding: z.enum(['utf8', 'base64']),
    content: z.string(),
    /** sha256 (hex) of the whole file: pass it as `expectedSha256` to write or edit only that version. */
    sha256: z.string(),
    totalBytes: z.number().int(),
    /** Text only: lines in the file, the window returned (1-based, inclusive), and what is left. */
    totalLines: z.number().int().optional(),
    fromLine: z.number().int().optional(),
    toLine: z.number().int().optional(),
    truncated: z.boolean().optional(),
    remaining: z.object({ fromLine: z.number().int(), toLine: z.number().int() }).nullable().optional(),
  })
  .loose();
export type ReadFileData = z.infer<typeof ReadFileData>;

/** `write_file`: what was written; `diff` is a unified diff against the previous text (null for binary or new files). */
export const WriteFileData = z
  .object({
    path: z.string(),
    bytes: z.number().int(),
    sha256: z.string(),
    created: z.boolean(),
    diff: z.string().nullable(),
    diffTruncated: z.boolean(),
  })
  .loose();
export type WriteFileData = z.infer<typeof WriteFileData>;

/** `edit_file`: how many replacements, the new sha256 and the unified diff. */
export const EditFileData = z
  .object({ path: z.string(), replacements: z.number().int(), sha256: z.string(), diff: z.string(), diffTruncated: z.boolean() })
  .loose();
export type EditFileData = z.infer<typeof EditFileData>;

/** `list_files`: entries sorted, bounded (`truncated`); symlinks listed with their `target`, never followed. */
export const ListFilesData = z
  .object({
    path: z.string(),
    entries: z.array(
      z
        .object({
          path: z.string(),
          type: z.enum(['file', 'directory', 'symlink', 'other']),
          size: z.number().int(),
          target: z.string().optional(),
        })
        .loose(),
    ),
    truncated: z.boolean(),
  })
  .loose();
export type ListFilesData = z.infer<typeof ListFilesData>;

const GitChange = z.object({ path: z.string(), status: z.string(), from: z.string().optional() }).loose();

/** `git_status`: `git status --porcelain=v2` parsed. */
export const GitStatusData = z
  .object({
    path: z.string(),
    branch: z
      .object({
        head: z.string().nullable(),
        oid: z.string().nullable(),
        upstream: z.string().nullable(),
        ahead: z.number().int(),
        behind: z.number().int(),
      })
      .loose(),
    staged: z.array(GitChange),
    unstaged: z.array(GitChange),
    untracked: z.array(z.string()),
    conflicted: z.array(GitChange),
  })
  .loose();
export type GitStatusData = z.infer<typeof GitStatusData>;

/** `git_diff`: up to `maxBytes` of the unified diff; the whole one is the artifact `diffArtifact` when cut. */
export const GitDiffData = z
  .object({
    path: z.string(),
    staged: z.boolean(),
    diff: z.string(),
    diffTruncated: z.boolean(),
    diffBytes: z.number().int().optional(),
    diffArtifact: z.string().nullable().optional(),
  })
  .loose();
export type GitDiffData = z.infer<typeof GitDiffData>;

const EntryType = z.enum(['file', 'directory', 'symlink', 'other']);

/** `remove`: what was there (`existed: false` and `type: null` for a missing path). */
export const RemoveData = z.object({ path: z.string(), existed: z.boolean(), type: EntryType.nullable(), recursive: z.boolean() }).loose();
export type RemoveData = z.infer<typeof RemoveData>;

/** `move`: canonical source and destination; `atomic: false` when it crossed filesystems (copied, then removed). */
export const MoveData = z
  .object({ path: z.string(), destination: z.string(), type: EntryType, replaced: z.boolean(), atomic: z.boolean() })
  .loose();
export type MoveData = z.infer<typeof MoveData>;

/** `make_dir`: the canonical directory, whether anything was made, and which directories. */
export const MakeDirData = z.object({ path: z.string(), created: z.boolean(), createdDirs: z.array(z.string()) }).loose();
export type MakeDirData = z.infer<typeof MakeDirData>;

/** `stat`: the path itself (a symlink is not followed: `symlinkTarget` is its text). */
export const StatData = z
  .object({
    path: z.string(),
    type: EntryType,
    sizeBytes: z.number().int(),
    /** Permission bits with setuid/setgid/sticky (`& 0o7777`). */
    mode: z.number().int(),
    /** As ls(1) shows them, e.g. `rwxr-xr-x`. */
    permissions: z.string(),
    uid: z.number().int(),
    gid: z.number().int(),
    /** Names from the image's /etc/passwd and /etc/group, else the id as a string. */
    owner: z.string(),
    group: z.string(),
    /** ISO 8601. */
    mtime: z.string(),
    mtimeMs: z.number(),
    symlinkTarget: z.string().nullable(),
  })
  .loose();
export type StatData = z.infer<typeof StatData>;
