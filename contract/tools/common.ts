/** Argument types several tools share. */
import { z } from 'zod';

/** A command text: NUL cannot be in an execve(2) argument, nor pass a shell's parser. */
export const notNul = (s: string): boolean => !s.includes('\0');

/** Environment variable names: POSIX portable names (IEEE Std 1003.1, 8.1). */
export const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be a POSIX environment variable name');
/**
 * Longest single argument or `NAME=value` string execve(2) accepts: MAX_ARG_STRLEN, 32 pages
 * = 131072 bytes including the terminating NUL (linux/binfmts.h).
 */
export const MAX_ARG_BYTES = 131071;
/** Whether a string fits one execve(2) argument. */
export const fitsExec = (v: string): boolean => Buffer.byteLength(v) <= MAX_ARG_BYTES;

/** Values are passed byte-exact; NUL cannot be in an environment string (execve(2)). */
export const EnvValue = z
  .string()
  .refine((v) => !v.includes('\0'), 'must not contain NUL')
  .refine(fitsExec, `must be at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN)`);
export const EnvMap = z.record(EnvName, EnvValue);

/** Absolute POSIX path inside the sandbox. */
export const SandboxPath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => !p.includes('\0'), 'must not contain NUL')
  .refine((p) => p.startsWith('/'), 'must be an absolute path');

/** Lower-case hex sha256 of a file's bytes. */
export const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'a lower-case hex sha256');
