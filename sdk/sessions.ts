/**
 * Shell sessions in the SDK: `sandbox.sessions.create()` starts a persistent shell whose cwd,
 * variables, functions, aliases and activated venv carry over; `session.exec(cmd)` runs one
 * command in it (commands of one session run one at a time, in order) and resolves with its
 * `ToolResult` (own exit code, stdout and stderr); `session.delete()` ends it.
 */
import type { ToolResult } from '../contract/objects.js';
import { SessionView } from '../contract/tools/session.js';
import type { SbxClient } from './client.js';
import type { OutputChunk } from './output-chunk.js';

/** What a session command takes of exec's options (cwd, env, stdin and secrets belong to the shell: use `cd`, `export`). */
export interface SessionExecOptions {
  /** Wall-clock limit, ms: at expiry the command is interrupted (SIGINT, then TERM, then KILL) and the session goes on. */
  timeoutMs?: number;
  killGraceMs?: number;
  /** stdout and stderr as one stream in write order. */
  combinedOutput?: boolean;
  callId?: string;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Each chunk of either stream as raw bytes (for binary output), as `ExecOptions.onOutput` (sandbox.ts). */
  onOutput?: (chunk: OutputChunk) => void;
  /** Aborting interrupts the command (the session goes on). */
  signal?: AbortSignal;
}

/** What sessions need of a sandbox (`Sandbox` is one). */
export interface SessionHost {
  readonly id: string;
  readonly client: Pick<SbxClient, 'json'>;
  exec(command: string, options: SessionExecOptions & { session: string }): Promise<ToolResult>;
}

export class SandboxSessions {
  constructor(private readonly sandbox: SessionHost) {}

  /**
   * Starts a session's shell (bash, else sh) as the tool user. Throws SbxError
   * `session.limit_reached` (the policy's `sessions.max`), `input.cwd_not_found`, `policy.tool_denied`.
   */
  async create(options: { cwd?: string; env?: Record<string, string> } = {}): Promise<Session> {
    const response = await this.sandbox.client.json('POST', `/v1/sandboxes/${this.sandbox.id}/sessions`, options);
    return new Session(this.sandbox, SessionView.parse(response));
  }

  /** Every session of the sandbox, running and ended. */
  async list(): Promise<SessionView[]> {
    const body = (await this.sandbox.client.json('GET', `/v1/sandboxes/${this.sandbox.id}/sessions`)) as { sessions: unknown[] };
    return body.sessions.map((s) => SessionView.parse(s));
  }

  /** A session by id. Throws SbxError `session.not_found`. */
  async get(sessionId: string): Promise<Session> {
    const response = await this.sandbox.client.json('GET', `/v1/sandboxes/${this.sandbox.id}/sessions/${sessionId}`);
    return new Session(this.sandbox, SessionView.parse(response));
  }
}

export class Session {
  constructor(
    private readonly sandbox: SessionHost,
    private current: SessionView,
  ) {}

  get id(): string {
    return this.current.sessionId;
  }

  /** The session as last read (status, pid, endedBy). */
  get view(): SessionView {
    return this.current;
  }

  /**
   * Runs `cmd` in the session's shell; resolves with its ToolResult (a timeout or cancel
   * interrupts the command and leaves the session usable). Throws SbxError `session.ended`.
   */
  async exec(cmd: string, options: SessionExecOptions = {}): Promise<ToolResult> {
    return this.sandbox.exec(cmd, { ...options, session: this.id });
  }

  /** Ends the session: its shell and every process it started are killed. */
  async delete(): Promise<SessionView> {
    this.current = SessionView.parse(await this.sandbox.client.json('DELETE', `/v1/sandboxes/${this.sandbox.id}/sessions/${this.id}`));
    return this.current;
  }
}
