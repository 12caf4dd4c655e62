/**
 * The sbx MCP server: an MCP `Server` (the official `@modelcontextprotocol/sdk`) that gives a
 * coding agent one sbx sandbox as its tool plane, over any MCP transport — stdio in `sbx mcp`
 * (cli/mcp.ts), Streamable HTTP at the control plane's `/mcp` (control-plane/mcp/).
 *
 * - Tools: the platform's own (`GET /v1/tools`: names and input JSON Schemas), each description
 *   extended with what the platform guarantees and what it does not — timeouts, truncation,
 *   effects (a result is not a receipt; a timeout is not "no effect").
 * - A sandbox is leased at the first tool call (not at start: a client that only lists tools
 *   costs nothing) and released by `release()` (the transport's owner calls it when the session ends).
 * - A call that ran and did not succeed, and every platform error (a 4xx, the sandbox's end, an
 *   unreachable API), is a tool result with `isError: true` whose text and `structuredContent`
 *   carry the platform's `code` and `retryability`, so the model can act on it. What is wrong
 *   with the MCP request itself (an unknown tool name) stays a protocol error.
 * - MCP request cancellation cancels the sandbox call; a request with a `progressToken` gets a
 *   progress notification per output chunk (clients may reset their request timeout on those).
 * - `shell` (sdk/mcp-shell.ts): commands in one persistent shell session, whose cwd, variables,
 *   functions, aliases and venv carry over between calls.
 * - One tool of the server's own, `snapshot`: checkpoints the session's sandbox filesystem
 *   (`POST /v1/sandboxes/:id/snapshots`) and returns the snapshot id, from which another session
 *   starts (`sbx mcp --snapshot ID`).
 */
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { CallEvent } from '../contract/events.js';
import type { ErrorInfo } from '../contract/errors.js';
import type { ToolResult } from '../contract/objects.js';
import { SBX_VERSION } from '../contract/version.js';
import { McpShell, parseShellArgs, SHELL_TOOL } from './mcp-shell.js';
import { SbxError } from './errors.js';
import { Sandbox, connect, type ConnectionOptions } from './sandbox.js';
import type { CreateSandboxOptions, ToolDescription } from './client.js';

export interface McpServerOptions {
  connection: ConnectionOptions;
  /** How the sandbox is leased at the first tool call. */
  lease: CreateSandboxOptions;
  /** Told when releasing the sandbox failed (it then ends at its TTL). */
  onReleaseError?: (sandboxId: string, err: Error) => void;
}

/** Said of every tool: how to read its results. */
const COMMON_SEMANTICS =
  "Runs inside an isolated sbx sandbox (a container under the lease's policy: no network in `default`, read-only root, writable /workspace, /tmp and home) as an unprivileged user. " +
  'The text you get is a short, lossy summary, not a receipt: it ends with a line `[sbx] status=… [code=…] [exitCode=…] receipt=… commitState=…`; `commitState` says what is known about the effect (`not_started`, `committed`, `unknown`). ' +
  "Errors come back with isError and the platform's stable code (`domain.reason`) and retryability (`no`, `after_fix`, `safe`, `reconcile_first` = check the state before retrying).";

/** Per tool: timeouts, truncation and effects, as the platform implements them. */
const TOOL_SEMANTICS: Record<string, string> = {
  exec:
    'Give exactly one of `cmd` (a bash script: pipes, &&, heredocs) or `argv` (no shell). Timeout: `timeoutMs`, default the policy\'s (10 min under `default`, at most 1 h; higher is policy.tool_denied); at the timeout the whole process group is killed (SIGTERM, SIGKILL after killGraceMs) and the result is `timed_out` with commitState `unknown`: the command may have changed files before it was killed — a timeout is not "no effect"; check before re-running. ' +
    'Output: stdout and stderr apart; each stream keeps its first 4 MiB (`default`), the text shows the head and the tail of a cut stream and the whole is kept as an artifact. A non-zero exit is isError with `execution.nonzero_exit` and the exit code. ' +
    "Effects: anything the tool user may do in the sandbox; nothing is undone. Cancelling the request kills the process group (commitState `unknown`). Background processes left running are killed when the call ends. `background: true` answers as soon as the process runs, with status `detached` and its `callId` (the task runs on, its output kept, until it ends, times out or is cancelled); `pty` may only be false. MCP clients often time out requests after 60 s: pass a `timeoutMs` below your client's limit for long commands.",
  read_file:
    'Read-only. Returns a window of lines (`offset` 1-based, `limit` lines, default 2000) and the sha256 of the whole file; `truncated` and `remaining` say what was left out. Binary files are `files.binary` unless `encoding: base64`. Missing file: `files.not_found`.',
  write_file:
    'Replaces or creates the whole file atomically (temp file, fsync, rename): readers see the old or the new content, never a mix; parent directories are created. `expectedSha256` makes it a compare-and-swap (`files.conflict`, nothing written); `createOnly` refuses to replace (`files.exists`). Returns a unified diff.',
  edit_file:
    'Replaces an exact string (no regex) atomically: once, or every occurrence with `replaceAll`. No match: `edit.no_match`; several without replaceAll: `edit.ambiguous_match` with the count; nothing is written then. Keeps line endings and BOM.',
  list_files: 'Read-only. Sorted entries `depth` levels deep, at most `limit` (`truncated` when cut); symlinks are listed, never followed.',
  glob: 'Read-only. Paths matching a glob pattern under `path`, at most `limit` (`truncated` when cut); symlinks are not followed.',
  search:
    'Read-only. ripgrep over file contents (regex, or `literal`), at most `limit` matches with path and line; files ignored by .gitignore, hidden and binary files are skipped.',
  git_status:
    'Runs git (counts as running code: needs exec enabled). Staged, unstaged, untracked and conflicted paths and the branch; reports the whole work tree.',
  git_diff:
    'Runs git (counts as running code: needs exec enabled). The unified diff of the work tree (or the index with `staged`), at most `maxBytes` in the result; a cut diff is kept whole as an artifact.',
  remove:
    'Removes a file, symlink (the link, not its target) or directory; a directory with entries needs `recursive` (else `files.not_empty`, nothing removed). A missing path succeeds with `existed: false`. A root (/workspace) is refused. Not undoable.',
  move: 'Renames or moves a path, making missing parent directories of `destination`; an existing destination is `files.exists` unless `overwrite`. Across filesystems (/workspace to /tmp) it copies then removes (`atomic: false`).',
  make_dir: 'Creates a directory with missing parents (mkdir -p); an existing directory succeeds with `created: false`.',
  stat: 'Read-only. Type, size, mode, owner and group names, mtime; a symlink is reported as the link with its target.',
  list_processes:
    'Read-only. Every process of the sandbox with pid, user, command, CPU time, RSS, the call/session/terminal it belongs to and whether you may signal it. Runs even while an exec is running.',
  signal_process:
    "Sends a signal (default SIGTERM) to one of the tool user's processes, e.g. SIGINT to stop a dev server or a stuck foreground command (its exec call then ends). Init, the agent and its worker are `process.not_killable`.",
};

/** The server's own tool: a checkpoint of the session's sandbox filesystem. */
export const SNAPSHOT_TOOL: Tool = {
  name: 'snapshot',
  description:
    "Checkpoints this session's sandbox: its filesystem — files changed anywhere plus every writable root (/workspace, /tmp, home, the lease's own roots) — as a snapshot of the tenant's, while the sandbox keeps running. Returns the snapshot id (`snap_…`); a new session started with `sbx mcp --snapshot <id>` (or `POST /v1/sandboxes {snapshot}`) begins with exactly these files. " +
    'Not captured: memory and running processes (background tasks start afresh). Calls still running are not waited for: their effects may be in the snapshot partly or not at all (`inFlightCalls` lists them). ' +
    "The snapshot counts against the tenant snapshot bytes quota (`quota.exceeded`) and expires after `ttlSeconds` (default and at most the platform's retention). Leases the sandbox first if no tool was called yet.",
  inputSchema: {
    type: 'object',
    properties: { ttlSeconds: { type: 'integer', minimum: 1, description: 'how long the snapshot is kept, seconds' } },
    additionalProperties: false,
  },
};

/** The MCP tool for a platform tool: its schema as the platform gives it, its description with the semantics above. */
function mcpTool(tool: ToolDescription): Tool {
  const description = [tool.description, TOOL_SEMANTICS[tool.name], `Effect classes: ${tool.effectClasses.join(', ')}.`, COMMON_SEMANTICS]
    .filter(Boolean)
    .join('\n\n');
  return { name: tool.name, description, inputSchema: { ...tool.inputSchema, type: 'object' } };
}

/** The MCP result of a finished call: its model text, a fact line, and isError unless it succeeded. */
function fromResult(result: ToolResult, sandboxId: string): CallToolResult {
  const receipt = result.receipt;
  const facts = [
    `status=${result.status}`,
    ...(result.error ? [`code=${result.error.code}`, `retryability=${result.error.retryability}`] : []),
    ...(result.exitCode !== null ? [`exitCode=${result.exitCode}`] : []),
    ...(receipt ? [`receipt=${receipt.receiptId}`, `commitState=${receipt.commitState}`] : []),
    `callId=${result.callId}`,
    `sandbox=${sandboxId}`,
  ];
  const message = result.error && !result.modelText.includes(result.error.message) ? `\n${result.error.code}: ${result.error.message}` : '';
  return {
    content: [{ type: 'text', text: `${result.modelText}${message}\n[sbx] ${facts.join(' ')}` }],
    structuredContent: {
      status: result.status,
      error: result.error,
      exitCode: result.exitCode,
      receiptId: receipt?.receiptId ?? null,
      commitState: receipt?.commitState ?? null,
      callId: result.callId,
      sandboxId,
      data: result.data,
    },
    // A background task that started is no error: its handle (callId) is the answer.
    isError: result.status !== 'succeeded' && result.status !== 'detached',
  };
}

/** A `shell` result: the note (a new session was started) first, the session id in the fact line and structuredContent. */
function withNote(result: CallToolResult, note: string, sessionId: string | null): CallToolResult {
  const first = result.content[0];
  if (first?.type === 'text') first.text = `${note}${first.text}${sessionId ? ` session=${sessionId}` : ''}`;
  if (result.structuredContent) result.structuredContent = { ...result.structuredContent, sessionId };
  return result;
}

/** The MCP result of a platform error: isError, with its code, retryability and details. */
function fromError(error: ErrorInfo): CallToolResult {
  const details = error.details ? `\ndetails: ${JSON.stringify(error.details)}` : '';
  return {
    content: [
      {
        type: 'text',
        text: `${error.code}: ${error.message}${details}\n[sbx] status=error code=${error.code} retryability=${error.retryability}`,
      },
    ],
    structuredContent: { status: 'error', error },
    isError: true,
  };
}

/** The answer to a tool call the policy holds for approval: nothing ran; what to do next. */
function waitingForApproval(callId: string, hold: { rule: string; expiresAt: string }, sandboxId: string): CallToolResult {
  const text =
    `This call waits for a person's approval (policy rule ${hold.rule}) until ${hold.expiresAt}; nothing has run yet. ` +
    `Ask the user to approve call ${callId} in sandbox ${sandboxId} (POST /v1/sandboxes/${sandboxId}/calls/${callId}/approve, an approver key), ` +
    'then make the same tool call again, with the same arguments, to get its result.\n' +
    `[sbx] status=pending_approval callId=${callId} expiresAt=${hold.expiresAt}`;
  return {
    content: [{ type: 'text', text }],
    structuredContent: { status: 'pending_approval', callId, sandboxId, rule: hold.rule, expiresAt: hold.expiresAt },
    isError: true,
  };
}

/** An MCP server over one (lazily leased) sandbox, and `release` for when its session ends. */
export interface SbxMcpServer {
  server: Server;
  /** Ends the session: no sandbox is leased after it; releases the one leased, if any (idempotent; failures go to `onReleaseError`). */
  release(): Promise<void>;
  /** Ends the session as `release` does, but leaves the sandbox to the caller: its id (a lease under way waited for), or null. */
  end(): Promise<string | null>;
  /** The leased sandbox's id, or null while none is. */
  sandboxId(): Promise<string | null>;
}

/**
 * Makes the MCP server of one session. Throws SbxError `auth.missing_api_key` when the
 * connection has no key. The sandbox is leased at the first tool call.
 */
export function createMcpServer(options: McpServerOptions): SbxMcpServer {
  const client = connect(options.connection);
  const server = new Server({ name: 'sbx', version: SBX_VERSION }, { capabilities: { tools: {} } });
  let tools: Promise<ToolDescription[]> | undefined;
  let sandbox: Promise<Sandbox> | undefined;
  /** Set by `end`/`release`: no sandbox is leased after it. */
  let ended = false;

  /** The platform's tools, read once; a failed read is tried again at the next request. */
  const platformTools = (): Promise<ToolDescription[]> => {
    tools ??= client.listTools().catch((err: unknown) => {
      tools = undefined;
      throw err;
    });
    return tools;
  };
  /** The session's sandbox, leased at the first call; a failed lease is tried again at the next call. */
  const leased = (): Promise<Sandbox> => {
    // An ended session leases nothing more (a tool call racing its end would leave a sandbox behind).
    if (ended)
      return Promise.reject(
        new SbxError({ code: 'mcp.session_not_found', domain: 'mcp', message: 'the MCP session has ended', retryability: 'after_fix' }),
      );
    sandbox ??= Sandbox.create({ ...options.connection, ...options.lease }).catch((err: unknown) => {
      sandbox = undefined;
      throw err;
    });
    return sandbox;
  };

  server.setRequestHandler(ListToolsRequestSchema, async () => {
    try {
      return { tools: [...(await platformTools()).map(mcpTool), SNAPSHOT_TOOL, SHELL_TOOL as unknown as Tool] };
    } catch (err) {
      throw new McpError(ErrorCode.InternalError, `the sbx tool list could not be read: ${(err as Error).message}`);
    }
  });

  /** Calls held for approval, by tool name and arguments: asked again, the same call answers. */
  const awaitingApproval = new Map<string, string>();
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args = {} } = request.params;
    if (name === SNAPSHOT_TOOL.name) return snapshotTool(args);
    if (name === SHELL_TOOL.name) return shellTool(args, extra.signal);
    const known = await platformTools().catch(() => null);
    // Without the list (API unreachable) the call goes ahead: the platform names an unknown tool itself.
    if (known && !known.some((t) => t.name === name)) throw new McpError(ErrorCode.InvalidParams, `unknown tool: ${name}`);
    const progressToken = request.params._meta?.progressToken;
    let progress = 0;
    const onEvent = (event: CallEvent): void => {
      if (progressToken === undefined || event.type !== 'output') return;
      const text = Buffer.from(event.dataBase64, 'base64').toString('utf8');
      progress += 1;
      void extra
        .sendNotification({
          method: 'notifications/progress',
          params: { progressToken, progress, message: `${event.stream}: ${text.slice(0, 1000)}` },
        })
        .catch(() => undefined);
    };
    try {
      const sbx = await leased();
      // A call the policy holds for a person's approval is answered as such at once; the same
      // tool call asked again is the same call (its callId kept), so it then gets the outcome.
      const key = `${name} ${JSON.stringify(args)}`;
      const callId = awaitingApproval.get(key) ?? `mcp_${randomUUID().replaceAll('-', '')}`;
      let held: (event: Extract<CallEvent, { type: 'call.pending_approval' }>) => void = () => undefined;
      const onHold = new Promise<Extract<CallEvent, { type: 'call.pending_approval' }>>((resolve) => (held = resolve));
      const run = sbx.call(name, args, {
        callId,
        signal: extra.signal,
        onEvent: (event) => (event.type === 'call.pending_approval' ? held(event) : onEvent(event)),
      });
      const first = await Promise.race([run.then((result) => ({ result })), onHold.then((hold) => ({ hold }))]).finally(() =>
        awaitingApproval.delete(key),
      );
      if ('hold' in first) {
        // Held: the same tool call asked again is this call.
        awaitingApproval.set(key, callId);
        // Followed on in the background until approved, denied or expired; the agent asks again.
        run.catch(() => undefined);
        return waitingForApproval(callId, first.hold, sbx.id);
      }
      return fromResult(first.result, sbx.id);
    } catch (err) {
      if (err instanceof SbxError) return fromError(err.info);
      throw err;
    }
  });

  /** The `shell` tool: a command in the MCP session's persistent shell session (`sdk/mcp-shell.ts`). */
  const shell = new McpShell();
  const shellTool = async (args: Record<string, unknown>, signal: AbortSignal): Promise<CallToolResult> => {
    let parsed;
    try {
      parsed = parseShellArgs(args);
    } catch (err) {
      throw new McpError(ErrorCode.InvalidParams, (err as Error).message);
    }
    try {
      const sbx = await leased();
      const { result, note } = await shell.run(sbx, parsed, signal);
      return withNote(fromResult(result, sbx.id), note, await shell.id());
    } catch (err) {
      if (err instanceof SbxError) return fromError(err.info);
      throw err;
    }
  };

  /** The `snapshot` tool: a checkpoint of the session's sandbox; its id in the text and structuredContent. */
  const snapshotTool = async (args: Record<string, unknown>): Promise<CallToolResult> => {
    const ttl = args.ttlSeconds;
    if (ttl !== undefined && (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 1))
      throw new McpError(ErrorCode.InvalidParams, 'ttlSeconds must be a positive integer');
    const extra = Object.keys(args).filter((k) => k !== 'ttlSeconds');
    if (extra.length > 0) throw new McpError(ErrorCode.InvalidParams, `snapshot takes only ttlSeconds, not ${extra.join(', ')}`);
    try {
      const sbx = await leased();
      const snap = await sbx.snapshot(ttl === undefined ? {} : { ttlSeconds: ttl });
      const facts = [`status=succeeded`, `snapshot=${snap.id}`, `sizeBytes=${snap.sizeBytes}`, `sandbox=${sbx.id}`];
      return {
        content: [
          {
            type: 'text',
            text: `snapshot ${snap.id} of sandbox ${sbx.id} (${snap.sizeBytes} bytes, expires ${snap.expiresAt}${snap.inFlightCalls.length > 0 ? `, ${snap.inFlightCalls.length} call(s) in flight not waited for` : ''}); start from it with \`sbx mcp --snapshot ${snap.id}\`\n[sbx] ${facts.join(' ')}`,
          },
        ],
        structuredContent: {
          status: 'succeeded',
          snapshotId: snap.id,
          sizeBytes: snap.sizeBytes,
          expiresAt: snap.expiresAt,
          inFlightCalls: snap.inFlightCalls,
          sandboxId: sbx.id,
        },
        isError: false,
      };
    } catch (err) {
      if (err instanceof SbxError) return fromError(err.info);
      throw err;
    }
  };

  /** Ends the session's leasing; the sandbox it leased (waited for, if a lease is under way), or null. */
  const end = async (): Promise<Sandbox | null> => {
    ended = true;
    return (await sandbox?.catch(() => undefined)) ?? null;
  };
  let released: Promise<void> | undefined;
  return {
    server,
    end: async () => (await end())?.id ?? null,
    release: () =>
      (released ??= (async () => {
        const sbx = await end();
        await sbx?.release().catch((err: unknown) => options.onReleaseError?.(sbx.id, err as Error));
      })()),
    sandboxId: async () => (await sandbox?.catch(() => undefined))?.id ?? null,
  };
}
