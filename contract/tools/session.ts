/**
 * Shell sessions (issue 13 part 2): a persistent shell per session whose cwd, exported
 * variables, functions, aliases and activated venv carry over between commands. A session is
 * started by a `session_start` call (a background call that lives as long as the shell: its
 * handle answers at once, its result is the session's end); each command is an `exec` call with
 * `session: ID`; deleting a session cancels its `session_start` call.
 */
import { z } from 'zod';
import { EnvMap, SandboxPath } from './common.js';
import type { ToolSpec } from './spec.js';
import { ToolResult } from '../objects.js';

/** A session id as the API returns it: `ses_` and 32 hex digits (safe in keys, paths and URLs). */
export const SessionId = z.string().regex(/^ses_[0-9a-f]{32}$/, 'a session id (ses_ and 32 hex digits)');
export type SessionId = z.infer<typeof SessionId>;

/** `session_start`: the shell of one session, as the tool user. Started by `POST /v1/sandboxes/:id/sessions`. */
export const SessionStartArgs = z
  .object({
    sessionId: SessionId,
    /** The shell's first working directory; default the sandbox's workdir. */
    cwd: SandboxPath.optional(),
    /** Variables exported in the shell at start, over the lease's env. */
    env: EnvMap.default({}),
    /** The session ends after this long without a command, ms (policy `sessions.idleTimeoutSeconds`). */
    idleTimeoutMs: z
      .number()
      .int()
      .min(1000)
      .max(7 * 24 * 3600 * 1000),
  })
  .strict();
export type SessionStartArgs = z.infer<typeof SessionStartArgs>;

export const sessionStartSpec: ToolSpec<SessionStartArgs, 'session_start'> = {
  name: 'session_start',
  version: '1',
  description: 'Starts the persistent shell of a session (used by POST /v1/sandboxes/:id/sessions; run commands with exec {session}).',
  args: SessionStartArgs,
  effectClasses: ['process'],
  limits: 'exec',
  // Starting a shell touches nothing yet; it runs in order with every other call, then detaches.
  accesses: () => [{ kind: 'all' }],
  internal: { startedBy: 'POST /v1/sandboxes/:id/sessions' },
};

/** A session as the API shows it. */
export const SessionView = z.object({
  sessionId: SessionId,
  sandboxId: z.string(),
  /** `running` while its shell lives; `ended` after DELETE, the idle timeout, or its shell's exit. */
  status: z.enum(['starting', 'running', 'ended']),
  /** The `session_start` call that holds the shell (its events and receipt via the calls API). */
  callId: z.string(),
  /** The shell's pid (its process group and session id), once running. */
  pid: z.number().int().nullable(),
  cwd: z.string().nullable(),
  createdAt: z.string(),
  /** Why it ended: `deleted`, `idle`, `exited`; null while running. */
  endedBy: z.string().nullable(),
  /** The `session_start` call's result once the session ended. */
  result: ToolResult.nullable(),
});
export type SessionView = z.infer<typeof SessionView>;
