/**
 * Tool argument schemas shared by the control plane (which validates and resolves a call) and
 * the agent (which executes it). A tool's schema is its input contract.
 */
import { z } from 'zod';
import { SecretName } from './secrets.js';

/** Environment variable names: POSIX portable names (IEEE Std 1003.1, 8.1). */
export const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be a POSIX environment variable name');
/**
 * Longest single argument or `NAME=value` string execve(2) accepts: MAX_ARG_STRLEN, 32 pages
 * = 131072 bytes including the terminating NUL (linux/binfmts.h).
 */
export const MAX_ARG_BYTES = 131071;
const fitsExec = (v: string): boolean => Buffer.byteLength(v) <= MAX_ARG_BYTES;

/** Values are passed byte-exact; NUL cannot be in an environment string (execve(2)). */
export const EnvValue = z
  .string()
  .refine((v) => !v.includes('\0'), 'must not contain NUL')
  .refine(fitsExec, `must be at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN)`);
export const EnvMap = z.record(EnvName, EnvValue);

/** Absolute POSIX path inside the sandbox. */
export const SandboxPath = z.string().min(1).max(4096).refine((p) => p.startsWith('/') && !p.includes('\0'), 'must be an absolute path');

/**
 * `exec`: run a program. Exactly one of `argv` (no shell) or `cmd` (a `bash -c` script: pipes,
 * heredocs and `&&` work) must be given.
 */
export const ExecArgs = z
  .object({
    argv: z
      .array(z.string().refine((s) => !s.includes('\0'), 'must not contain NUL').refine(fitsExec, `each argument at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN)`))
      .min(1)
      .optional(),
    /** Passed to bash as one argument, so at most MAX_ARG_BYTES; longer scripts go in a file (upload) or `stdin`. */
    cmd: z.string().min(1).refine(fitsExec, `at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN); upload longer scripts`).optional(),
    /** Working directory; default `/workspace`. */
    cwd: SandboxPath.default('/workspace'),
    /** Extra environment for this call, over the lease's env. */
    env: EnvMap.default({}),
    /**
     * Names of the lease's granted secrets this call's process receives (as the env var and/or
     * file the lease asked for); other calls never see them. A name the lease was not granted is
     * `policy.secret_denied`.
     */
    secrets: z
      .array(SecretName)
      .min(1)
      .max(64)
      .refine((names) => new Set(names).size === names.length, 'names must be distinct')
      .optional(),
    /** Bytes written to the process's stdin (UTF-8), then stdin is closed. Without it stdin is empty. */
    stdin: z.string().max(16 * 1024 * 1024).optional(),
    /** Wall-clock limit in ms; on expiry the process group gets SIGTERM, then SIGKILL after `killGraceMs`. */
    timeoutMs: z.number().int().min(1).max(24 * 3600 * 1000).optional(),
    /** Time between SIGTERM and SIGKILL, ms. */
    killGraceMs: z.number().int().min(0).max(60_000).default(2000),
    /**
     * Run as a background task: the call answers `detached` with its handle (the callId) as
     * soon as the process started; its output streams on as events, and the call finishes when
     * the process ends (or on cancel, or at `timeoutMs`).
     */
    background: z.boolean().default(false),
    /** Commands run with pipes (stdout and stderr apart); a pseudo-terminal is not offered. */
    pty: z.literal(false, { message: 'pty: true is not supported; commands run with pipes, stdout and stderr apart' }).default(false),
  })
  .strict()
  .refine((a) => (a.argv === undefined) !== (a.cmd === undefined), { message: 'give exactly one of argv or cmd', path: ['argv'] });
export type ExecArgs = z.infer<typeof ExecArgs>;

/** Lower-case hex sha256 of a file's bytes. */
export const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'a lower-case hex sha256');

/** `read_file`: a window of lines of a text file, or a binary file as base64. */
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

/** `write_file`: replaces or creates a file atomically (temp file, fsync, rename). */
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
  .refine((a) => a.encoding !== 'base64' || /^[A-Za-z0-9+/]*={0,2}$/.test(a.content) && a.content.length % 4 === 0, {
    message: 'not valid base64 (RFC 4648 alphabet, padded)',
    path: ['content'],
  });
export type WriteFileArgs = z.infer<typeof WriteFileArgs>;

/** `edit_file`: exact-string replacement in a text file, keeping its line endings and BOM. */
export const EditFileArgs = z
  .object({
    path: SandboxPath,
    oldString: z.string().min(1),
    newString: z.string(),
    /** Replace every match; without it `oldString` must match exactly once. */
    replaceAll: z.boolean().default(false),
    expectedSha256: Sha256Hex.optional(),
  })
  .strict()
  .refine((a) => a.oldString !== a.newString, { message: 'newString must differ from oldString', path: ['newString'] });
export type EditFileArgs = z.infer<typeof EditFileArgs>;

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

/** `git_status`: the work tree's state from `git status --porcelain=v2 -z --branch`. */
export const GitStatusArgs = z.object({ path: SandboxPath.default('/workspace') }).strict();
export type GitStatusArgs = z.infer<typeof GitStatusArgs>;

/** `git_diff`: the unified diff of the work tree (or the index with `staged`). */
export const GitDiffArgs = z
  .object({
    path: SandboxPath.default('/workspace'),
    staged: z.boolean().default(false),
    /** Bytes of diff returned in the result; the rest is counted. */
    maxBytes: z.number().int().min(1024).max(16 * 1024 * 1024).default(256 * 1024),
  })
  .strict();
export type GitDiffArgs = z.infer<typeof GitDiffArgs>;

/** Tools the agent offers, by name. */
export const TOOL_ARGS = {
  exec: ExecArgs,
  read_file: ReadFileArgs,
  write_file: WriteFileArgs,
  edit_file: EditFileArgs,
  list_files: ListFilesArgs,
  glob: GlobArgs,
  search: SearchArgs,
  git_status: GitStatusArgs,
  git_diff: GitDiffArgs,
} as const;
export type ToolName = keyof typeof TOOL_ARGS;
export const ToolName = z.enum(Object.keys(TOOL_ARGS) as [ToolName, ...ToolName[]]);
