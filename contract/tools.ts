/**
 * Tool argument schemas shared by the control plane (which validates and resolves a call) and
 * the agent (which executes it). A tool's schema is its input contract.
 */
import { z } from 'zod';

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
    /** Bytes written to the process's stdin (UTF-8), then stdin is closed. Without it stdin is empty. */
    stdin: z.string().max(16 * 1024 * 1024).optional(),
    /** Wall-clock limit in ms; on expiry the process group gets SIGTERM, then SIGKILL after `killGraceMs`. */
    timeoutMs: z.number().int().min(1).max(24 * 3600 * 1000).optional(),
    /** Time between SIGTERM and SIGKILL, ms. */
    killGraceMs: z.number().int().min(0).max(60_000).default(2000),
  })
  .strict()
  .refine((a) => (a.argv === undefined) !== (a.cmd === undefined), { message: 'give exactly one of argv or cmd', path: ['argv'] });
export type ExecArgs = z.infer<typeof ExecArgs>;

/** Tools the agent offers, by name. */
export const TOOL_ARGS = { exec: ExecArgs } as const;
export type ToolName = keyof typeof TOOL_ARGS;
export const ToolName = z.enum(Object.keys(TOOL_ARGS) as [ToolName, ...ToolName[]]);
