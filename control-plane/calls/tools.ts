/**
 * The control plane's side of the tools (contract/tools/ declares each tool once): the `resolve`
 * step, which parses a call's arguments, normalizes them and applies the lease's policy before
 * anything is queued (docs/DESIGN.md §3: validate → resolve → authorize). `GET /v1/tools`
 * serves the specs' public part.
 */
import { posix } from 'node:path';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import type { CallJob, SecretGrant } from '../../contract/queue.js';
import { ExecArgs, isOfferedAsCall, PROCESS_TOOLS, runsCode, SessionStartArgs, TOOL_SPECS, type ToolSpec } from '../../contract/tools.js';
import { terminalSpec } from '../../contract/tools/terminal.js';
import type { Policy } from '../policies/schema.js';

/** The effect of a call, after normalization and policy. */
export interface ResolvedExecution {
  args: Record<string, unknown>;
  /** What the call touches (paths lexically normalized); the agent resolves them canonically and schedules by them. */
  accesses: CallJob['accesses'];
  /** Effective timeout after policy, ms. */
  timeoutMs: number;
  /** Per-stream output bytes kept. */
  maxOutputBytes: number;
}

export interface ToolDefinition {
  readonly spec: ToolSpec;
  readonly name: string;
  readonly version: string;
  /**
   * Parses args (throws ZodError) and authorizes them against the lease's policy and the secrets
   * it was granted (throws AppError `policy.tool_denied`, `policy.secret_denied`,
   * `input.path_outside_workspace`).
   */
  resolve(args: unknown, policy: Policy, grants: readonly SecretGrant[]): ResolvedExecution;
}

function resolveExec(raw: unknown, policy: Policy, grants: readonly SecretGrant[]): ResolvedExecution {
  const rules = policy.tools.exec;
  if (!rules.enabled) throw new AppError('policy.tool_denied', `policy ${policy.name} disables exec`, { details: { tool: 'exec' } });
  const args = ExecArgs.parse(raw);
  const timeoutMs = args.timeoutMs ?? rules.defaultTimeoutMs;
  if (timeoutMs > rules.maxTimeoutMs) {
    throw new AppError('policy.tool_denied', `timeoutMs ${timeoutMs} is above the policy's maxTimeoutMs ${rules.maxTimeoutMs}`, {
      details: { tool: 'exec', field: 'args.timeoutMs', max: rules.maxTimeoutMs },
    });
  }
  const ungranted = (args.secrets ?? []).find((name) => !grants.some((g) => g.name === name));
  if (ungranted !== undefined) {
    throw new AppError('policy.secret_denied', `secret ${ungranted} was not granted to this sandbox (ask for it when leasing)`, {
      details: { tool: 'exec', field: 'args.secrets', name: ungranted },
    });
  }
  // Granted, but withdrawn since: the sandbox moved to a phase, or its policy to a version, without it.
  const withdrawn = (args.secrets ?? []).find((name) => !policy.secrets.allowed.includes(name));
  if (withdrawn !== undefined) {
    throw new AppError(
      'policy.secret_denied',
      `secret ${withdrawn} is withdrawn: the sandbox's current policy or phase does not allow it`,
      {
        details: { tool: 'exec', field: 'args.secrets', name: withdrawn, withdrawn: true },
      },
    );
  }
  return { args: { ...args, timeoutMs }, accesses: [{ kind: 'all' }], timeoutMs, maxOutputBytes: rules.maxOutputBytes };
}

/**
 * A file tool: its `path` is normalized lexically and must lie in a writable root here (the
 * authority decision, on the normalized target); the agent resolves the canonical path
 * (symlinks followed) to schedule the call and checks it against the roots again where the file is.
 */
function resolveFileTool(spec: ToolSpec, raw: unknown, policy: Policy): ResolvedExecution {
  const rules = policy.tools.files;
  if (!rules.enabled)
    throw new AppError('policy.tool_denied', `policy ${policy.name} disables the file tools`, { details: { tool: spec.name } });
  if (runsCode(spec) && !policy.tools.exec.enabled) {
    throw new AppError(
      'policy.tool_denied',
      `${spec.name} runs git, which runs commands a repository configures; policy ${policy.name} disables exec`,
      { details: { tool: spec.name } },
    );
  }
  const args = (spec.args as z.ZodType<{ path: string; destination?: string }>).parse(raw);
  const roots = policy.filesystem.writableRoots.map((r) => r.path);
  const normalized: Record<string, unknown> = { ...args };
  // `path`, and `move`'s `destination`: every path a tool touches is decided on its normalized form.
  for (const field of ['path', 'destination'] as const) {
    const given = args[field];
    if (given === undefined) continue;
    const path = posix.normalize(given).replace(/(.)\/+$/, '$1');
    if (!roots.some((r) => path === r || path.startsWith(`${r}/`))) {
      throw new AppError('input.path_outside_workspace', `${given} is outside the sandbox's file roots (${roots.join(', ')})`, {
        details: { field: `args.${field}`, path: given, roots },
      });
    }
    normalized[field] = path;
  }
  return {
    args: normalized,
    accesses: spec.accesses(normalized as never),
    timeoutMs: rules.defaultTimeoutMs,
    maxOutputBytes: policy.tools.exec.maxOutputBytes,
  };
}

/** `session_start` (sent by the sessions service only): exec must be enabled; the session lives until deleted or idle. */
function resolveSessionStart(raw: unknown, policy: Policy): ResolvedExecution {
  const rules = policy.tools.exec;
  if (!rules.enabled)
    throw new AppError('policy.tool_denied', `policy ${policy.name} disables exec`, { details: { tool: 'session_start' } });
  const args = SessionStartArgs.parse(raw);
  return { args, accesses: [{ kind: 'all' }], timeoutMs: rules.maxTimeoutMs, maxOutputBytes: rules.maxOutputBytes };
}

/**
 * A process tool (`list_processes`, `signal_process`): exec's limits decide, since the processes
 * it sees or signals are the tool user's programs; it touches no file (no accesses), so the agent
 * runs it beside a running exec. Its timeout is short: it reads /proc or sends one signal.
 */
function resolveProcessTool(spec: ToolSpec, raw: unknown, policy: Policy): ResolvedExecution {
  const rules = policy.tools.exec;
  if (!rules.enabled)
    throw new AppError('policy.tool_denied', `policy ${policy.name} disables exec, and with it the process tools`, {
      details: { tool: spec.name },
    });
  const args = spec.args.parse(raw) as Record<string, unknown>;
  return {
    args,
    accesses: spec.accesses(args),
    timeoutMs: Math.min(rules.defaultTimeoutMs, PROCESS_TOOL_TIMEOUT_MS),
    maxOutputBytes: rules.maxOutputBytes,
  };
}

/** Timeout of a process tool, ms (at most; a policy's lower exec default wins). */
const PROCESS_TOOL_TIMEOUT_MS = 30_000;

/**
 * `terminal` (sent by the terminals service only, which checks the policy's `terminals.max`
 * first): needs exec enabled; the idle and absolute timeouts and the output backlog come from
 * the policy's `terminals`.
 */
function resolveTerminal(raw: unknown, policy: Policy): ResolvedExecution {
  if (!policy.tools.exec.enabled)
    throw new AppError('policy.tool_denied', `policy ${policy.name} disables exec, so terminals too`, { details: { tool: 'terminal' } });
  const rules = policy.terminals;
  const timeoutMs = rules.maxDurationSeconds * 1000;
  const args = terminalSpec.args.parse({ ...(raw as object), idleTimeoutMs: rules.idleTimeoutSeconds * 1000, timeoutMs });
  return { args, accesses: [{ kind: 'all' }], timeoutMs, maxOutputBytes: rules.maxOutputBytes };
}

function resolverOf(spec: ToolSpec): ToolDefinition['resolve'] {
  if (spec.name === 'exec') return resolveExec;
  if (spec.name === 'session_start') return resolveSessionStart;
  if (spec.name === 'terminal') return resolveTerminal;
  if ((PROCESS_TOOLS as readonly string[]).includes(spec.name)) return (raw, policy) => resolveProcessTool(spec, raw, policy);
  return (raw, policy) => resolveFileTool(spec, raw, policy);
}

export const TOOLS: ReadonlyMap<string, ToolDefinition> = new Map(
  TOOL_SPECS.map((spec): [string, ToolDefinition] => [
    spec.name,
    {
      spec: spec as ToolSpec,
      name: spec.name,
      version: spec.version,
      resolve: resolverOf(spec as ToolSpec),
    },
  ]),
);

/** The public description of every tool, input schemas as JSON Schema (draft 2020-12). */
export function describeTools(): Array<{
  name: string;
  version: string;
  description: string;
  effectClasses: string[];
  inputSchema: unknown;
}> {
  // An internal tool (a session's shell, a terminal) is its own route's, not a tool to call.
  return TOOL_SPECS.filter(isOfferedAsCall).map((t) => ({
    name: t.name,
    version: t.version,
    description: t.description,
    effectClasses: [...t.effectClasses],
    inputSchema: z.toJSONSchema(t.args, { io: 'input', unrepresentable: 'any' }),
  }));
}
