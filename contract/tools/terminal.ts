/**
 * `terminal`: a program on a pseudo-terminal, as the tool user. An `internal` tool (a model does
 * not submit it through `POST .../calls`): `POST /v1/sandboxes/:id/terminals` starts one, and it
 * runs as a background-style call whose callId is the terminal's id, so its output events (gap-free
 * `seq`, resume), its receipt and its transcript artifact are the calls API's too.
 */
import { z } from 'zod';
import { EnvMap, SandboxPath, fitsExec, MAX_ARG_BYTES, notNul } from './common.js';
import type { ToolSpec } from './spec.js';

/** Largest number of columns or rows a terminal may have (a screen far beyond any real one). */
export const MAX_TERMINAL_CELLS = 1000;

/** Columns and rows of a terminal's window, 1..MAX_TERMINAL_CELLS each. */
export const TerminalSize = z
  .object({
    cols: z.number().int().min(1).max(MAX_TERMINAL_CELLS),
    rows: z.number().int().min(1).max(MAX_TERMINAL_CELLS),
  })
  .strict();
export type TerminalSize = z.infer<typeof TerminalSize>;

/**
 * A terminal's script: one execve(2) argument, so no NUL (the pty's spawn would cut the script at
 * it and run the rest unseen) and at most MAX_ARG_BYTES bytes of UTF-8.
 */
export const TerminalCmd = z
  .string()
  .min(1)
  .refine(notNul, 'must not contain NUL')
  .refine(fitsExec, `at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN)`);

export const TerminalArgs = z
  .object({
    /** A script run by the sandbox's shell (`-c`); without it, the shell as a login shell (`-l`). */
    cmd: TerminalCmd.optional(),
    cols: TerminalSize.shape.cols,
    rows: TerminalSize.shape.rows,
    /** Working directory; default the sandbox's workdir. */
    cwd: SandboxPath.optional(),
    /** Extra environment, over the lease's env (TERM is `xterm-256color` unless set here). */
    env: EnvMap.default({}),
    /** Ends the terminal after this long with neither input nor output, ms (from the policy's `terminals.idleTimeoutSeconds`). */
    idleTimeoutMs: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600 * 1000),
    /** Ends the terminal after this long whatever happens, ms (the policy's `terminals.maxDurationSeconds`). */
    timeoutMs: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600 * 1000),
  })
  .strict();
export type TerminalArgs = z.infer<typeof TerminalArgs>;

export const terminalSpec: ToolSpec<TerminalArgs, 'terminal'> = {
  name: 'terminal',
  version: '1',
  description: 'Runs a program (default: a login shell) on a pseudo-terminal as the sandbox tool user.',
  args: TerminalArgs,
  effectClasses: ['process', 'fs.read', 'fs.write'],
  limits: 'exec',
  // Until it is started it runs code like exec; once started it holds no access (like a background task).
  accesses: () => [{ kind: 'all' }],
  internal: { startedBy: 'POST /v1/sandboxes/:id/terminals' },
};
