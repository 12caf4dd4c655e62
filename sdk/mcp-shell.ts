/**
 * The MCP server's `shell` tool: commands in one persistent shell session of the MCP session's
 * sandbox (`POST /v1/sandboxes/:id/sessions`), so `cd`, `export`, functions, aliases and an
 * activated venv carry over between calls, as in the bash session OpenHands and SWE-agent keep.
 * The session starts at the first `shell` call; when it has ended (idle timeout, `exit`, a
 * command that could not be interrupted) the next call starts a new one and says so.
 */
import type { ToolResult } from '../contract/objects.js';
import { SbxError } from './errors.js';
import type { Sandbox } from './sandbox.js';
import type { Session } from './sessions.js';

/** The tool as MCP lists it (sdk/mcp-server.ts alone imports the MCP SDK). */
export const SHELL_TOOL = {
  name: 'shell',
  description:
    'Runs `cmd` in a persistent bash session (sh in an image without bash) of this sandbox: the working directory, exported variables, functions, aliases and an activated virtualenv carry over to the next `shell` call (unlike `exec`, which starts afresh each time). ' +
    'Each command gets its own exit code and separate stdout and stderr (or one ordered stream with `combinedOutput: true`, as `2>&1` in a terminal). Commands run one at a time, in order. ' +
    "Timeout: `timeoutMs` (default the policy's exec default); at the timeout the foreground command is interrupted (SIGINT, then SIGTERM, SIGKILL) and the session stays usable with its state; the result is `timed_out` with commitState `unknown`. " +
    'Background jobs (`cmd &`) keep running in the session; redirect their output to a file, since what they print after their command ended is dropped. `restart: true` ends the session (killing everything it started) and starts a fresh one first. ' +
    "The session ends after the policy's idle timeout without a command (1 h under `default`); the next call then starts a new one and says so.",
  inputSchema: {
    type: 'object',
    properties: {
      cmd: { type: 'string', minLength: 1, description: 'a shell command line (pipes, &&, heredocs)' },
      timeoutMs: { type: 'integer', minimum: 1, description: 'wall-clock limit of this command, ms' },
      combinedOutput: { type: 'boolean', description: 'stdout and stderr as one stream in write order' },
      restart: { type: 'boolean', description: 'end the current session and start a fresh one before running cmd' },
    },
    required: ['cmd'],
    additionalProperties: false,
  },
} as const;

/** The arguments of one `shell` call, checked. Throws Error with a message for the client. */
export function parseShellArgs(args: Record<string, unknown>): {
  cmd: string;
  timeoutMs?: number;
  combinedOutput?: boolean;
  restart: boolean;
} {
  const { cmd, timeoutMs, combinedOutput, restart, ...rest } = args;
  if (Object.keys(rest).length > 0)
    throw new Error(`shell takes cmd, timeoutMs, combinedOutput and restart, not ${Object.keys(rest).join(', ')}`);
  if (typeof cmd !== 'string' || cmd.length === 0) throw new Error('cmd must be a non-empty string');
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1))
    throw new Error('timeoutMs must be a positive integer');
  if (combinedOutput !== undefined && typeof combinedOutput !== 'boolean') throw new Error('combinedOutput must be a boolean');
  if (restart !== undefined && typeof restart !== 'boolean') throw new Error('restart must be a boolean');
  return {
    cmd,
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    ...(combinedOutput !== undefined ? { combinedOutput } : {}),
    restart: restart === true,
  };
}

/** The MCP session's one shell session, started when first needed. */
export class McpShell {
  private session: Promise<Session> | undefined;

  /**
   * Runs one `shell` call. Resolves with the command's ToolResult and a note when a new session
   * was started for it. Throws SbxError for what stopped it (`session.limit_reached`, `lease.*`).
   */
  async run(sandbox: Sandbox, args: ReturnType<typeof parseShellArgs>, signal: AbortSignal): Promise<{ result: ToolResult; note: string }> {
    let note = '';
    if (args.restart && this.session) {
      const old = await this.session.catch(() => undefined);
      this.session = undefined;
      await old?.delete().catch(() => undefined);
      note = 'a fresh shell session was started (restart). ';
    }
    const options = {
      signal,
      ...(args.timeoutMs !== undefined ? { timeoutMs: args.timeoutMs } : {}),
      ...(args.combinedOutput !== undefined ? { combinedOutput: args.combinedOutput } : {}),
    };
    for (let attempt = 0; ; attempt += 1) {
      if (!this.session) {
        this.session = sandbox.sessions.create().catch((err: unknown) => {
          this.session = undefined;
          throw err;
        });
      }
      const session = await this.session;
      try {
        return { result: await session.exec(args.cmd, options), note };
      } catch (err) {
        // The session ended between calls (idle timeout, `exit`): once, start a new one and run there.
        if (err instanceof SbxError && err.code === 'session.ended' && attempt === 0) {
          this.session = undefined;
          note = 'the earlier shell session had ended; a new one was started. ';
          continue;
        }
        throw err;
      }
    }
  }

  /** The session's result view for the text: which session ran the command. */
  async id(): Promise<string | null> {
    return (await this.session?.catch(() => undefined))?.id ?? null;
  }
}
