/** `exec`: run a program or a bash script as the tool user, in its own process group. */
import { z } from 'zod';
import { SecretName } from '../secrets.js';
import { EnvMap, fitsExec, MAX_ARG_BYTES, SandboxPath } from './common.js';
import { SessionId } from './session.js';
import type { ToolSpec } from './spec.js';

/**
 * `exec`: run a program. Exactly one of `argv` (no shell) or `cmd` (a `bash -c` script: pipes,
 * heredocs and `&&` work) must be given.
 */
export const ExecArgs = z
  .object({
    argv: z
      .array(
        z
          .string()
          .refine((s) => !s.includes('\0'), 'must not contain NUL')
          .refine(fitsExec, `each argument at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN)`),
      )
      .min(1)
      .optional(),
    /** Passed to bash as one argument, so at most MAX_ARG_BYTES; longer scripts go in a file (upload) or `stdin`. */
    cmd: z.string().min(1).refine(fitsExec, `at most ${MAX_ARG_BYTES} bytes (execve MAX_ARG_STRLEN); upload longer scripts`).optional(),
    /** Working directory; default the sandbox's workdir (`manifest.workdir`: the image's `WorkingDir`, else `/workspace`). */
    cwd: SandboxPath.optional(),
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
    /**
     * Bytes written to the process's stdin (UTF-8), then stdin is closed. Without it stdin is
     * empty. The exact value `"pipe"` instead keeps stdin open for `POST .../calls/:callId/stdin`
     * (bytes in order, `eof` closes it; the call's timeout still applies).
     */
    stdin: z
      .string()
      .max(16 * 1024 * 1024)
      .optional(),
    /** Wall-clock limit in ms; on expiry the process group gets SIGTERM, then SIGKILL after `killGraceMs`. */
    timeoutMs: z
      .number()
      .int()
      .min(1)
      .max(24 * 3600 * 1000)
      .optional(),
    /** Time between SIGTERM and SIGKILL, ms. */
    killGraceMs: z.number().int().min(0).max(60_000).default(2000),
    /**
     * Run as a background task: the call answers `detached` with its handle (the callId) as
     * soon as the process started; its output streams on as events, and the call finishes when
     * the process ends (or on cancel, or at `timeoutMs`).
     */
    background: z.boolean().default(false),
    /**
     * Run `cmd` in this shell session (`POST /v1/sandboxes/:id/sessions`): its cwd, variables,
     * functions and aliases carry over; commands of one session run one at a time, in order.
     * Not with `argv`, `cwd`, `env`, `secrets`, `stdin` or `background`.
     */
    session: SessionId.optional(),
    /**
     * stdout and stderr as one stream (one pipe for both, in the order written, as a terminal
     * shows them), carried as `stdout`; the receipt's `outputs.combined` and each output event's
     * `combined` say so. Default: two streams.
     */
    combinedOutput: z.boolean().default(false),
    /** Commands run with pipes (stdout and stderr apart); a pseudo-terminal is not offered. */
    pty: z.literal(false, { message: 'pty: true is not supported; commands run with pipes, stdout and stderr apart' }).default(false),
  })
  .strict()
  .refine((a) => (a.argv === undefined) !== (a.cmd === undefined), { message: 'give exactly one of argv or cmd', path: ['argv'] })
  // A NUL cannot be in an execve(2) argument: spawning would fail after the call was accepted.
  .refine((a) => a.cmd === undefined || !a.cmd.includes('\0'), {
    message: 'a command must not contain NUL',
    path: ['cmd'],
  })
  .refine(
    (a) =>
      a.session === undefined ||
      (a.cmd !== undefined &&
        a.cwd === undefined &&
        Object.keys(a.env).length === 0 &&
        a.secrets === undefined &&
        a.stdin === undefined &&
        !a.background),
    {
      message:
        'a session command is a cmd alone (cd, export and the like inside it instead of cwd and env; no secrets, stdin or background)',
      path: ['session'],
    },
  );
export type ExecArgs = z.infer<typeof ExecArgs>;

export const execSpec: ToolSpec<ExecArgs, 'exec'> = {
  name: 'exec',
  version: '1',
  description: 'Runs a program (argv) or a bash script (cmd) as the sandbox tool user in its own process group.',
  args: ExecArgs,
  effectClasses: ['process', 'fs.read', 'fs.write'],
  limits: 'exec',
  // A program may touch anything: exec runs alone, in order with every other call.
  accesses: () => [{ kind: 'all' }],
};
