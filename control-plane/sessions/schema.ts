/** HTTP schemas of shell sessions (issue 13 part 2). */
import { z } from 'zod';
import { EnvMap, SandboxPath } from '../../contract/tools.js';

/** A session id of any other form names no session: `404 session.not_found`, as an unknown one. */
export const SessionParams = z.object({
  id: z.string(),
  sessionId: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -'),
});

export const CreateSessionBody = z
  .object({
    /** The shell's first working directory; default the sandbox's workdir. */
    cwd: SandboxPath.optional(),
    /** Variables exported in the session's shell, over the lease's env. */
    env: EnvMap.optional(),
  })
  .strict()
  .meta({ examples: [{}, { cwd: '/workspace', env: { CI: '1' } }] });
export type CreateSessionBody = z.infer<typeof CreateSessionBody>;

/** One command of a session: `exec` with `session` (its other fields as exec's). */
export const SessionExecBody = z
  .object({
    cmd: z.string().min(1),
    timeoutMs: z.number().int().min(1).optional(),
    killGraceMs: z.number().int().min(0).max(60_000).optional(),
    combinedOutput: z.boolean().optional(),
    callId: z.string().optional(),
  })
  .strict()
  .meta({ examples: [{ cmd: 'cd src && export DEBUG=1' }, { cmd: 'pytest -x', timeoutMs: 600_000 }] });
export type SessionExecBody = z.infer<typeof SessionExecBody>;

export { SessionView } from '../../contract/tools/session.js';
