/**
 * The control plane's tool registry: each tool's definition (name, version, input schema,
 * effect classes, the accesses a call declares, limits) and its `resolve` step, which
 * normalizes arguments and applies the lease's policy before anything is queued (docs/DESIGN.md
 * §3: validate → resolve → authorize). `GET /v1/tools` serves these definitions.
 */
import { posix } from 'node:path';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import type { CallJob, SecretGrant } from '../../contract/queue.js';
import { ExecArgs, TOOL_ARGS } from '../../contract/tools.js';
import type { Policy } from '../policies/schema.js';

/** The effect of a call, after normalization and policy. */
export interface ResolvedExecution {
  args: Record<string, unknown>;
  /** What the call touches; the agent's scheduler keeps conflicting calls in order. */
  accesses: CallJob['accesses'];
  /** Effective timeout after policy, ms. */
  timeoutMs: number;
  /** Per-stream output bytes kept. */
  maxOutputBytes: number;
}

export interface ToolDefinition {
  name: string;
  version: string;
  description: string;
  /** What running the tool may do: `process` (runs code), `fs.read`, `fs.write`. */
  effectClasses: string[];
  inputSchema: z.ZodType;
  /**
   * Parses args (throws ZodError) and authorizes them against the lease's policy and the secrets
   * it was granted (throws AppError `policy.tool_denied`, `policy.secret_denied`,
   * `input.path_outside_workspace`).
   */
  resolve(args: unknown, policy: Policy, grants: readonly SecretGrant[]): ResolvedExecution;
}

const exec: ToolDefinition = {
  name: 'exec',
  version: '1',
  description: 'Runs a program (argv) or a bash script (cmd) as the sandbox tool user in its own process group.',
  effectClasses: ['process', 'fs.read', 'fs.write'],
  inputSchema: ExecArgs,
  resolve(raw, policy, grants) {
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
    // A program may touch anything: exec runs alone, in order with every other call.
    return { args: { ...args, timeoutMs }, accesses: [{ kind: 'all' }], timeoutMs, maxOutputBytes: rules.maxOutputBytes };
  },
};

/**
 * How a file tool takes part in scheduling and policy:
 * - `read`: declares a read of its (lexical) path; reads run side by side.
 * - `write`: declares access to everything. A write may reach its file through a symlink, so
 *   its lexical path cannot say what else it conflicts with; it runs alone, in order.
 * - `runs-code`: git runs commands a repository's own config and attributes name (filters):
 *   it counts as exec (needs exec enabled, runs alone, is swept afterwards).
 */
type FileToolKind = 'read' | 'write' | 'runs-code';

/**
 * A file tool: its `path` is normalized lexically and must lie in a writable root here; the
 * agent checks the canonical path (symlinks resolved) again where the file is.
 */
function fileTool(name: Exclude<keyof typeof TOOL_ARGS, 'exec'>, kind: FileToolKind, description: string): ToolDefinition {
  const schema = TOOL_ARGS[name] as z.ZodType<{ path: string }>;
  return {
    name,
    version: '1',
    description,
    effectClasses: kind === 'write' ? ['fs.read', 'fs.write'] : kind === 'runs-code' ? ['fs.read', 'process'] : ['fs.read'],
    inputSchema: schema,
    resolve(raw, policy) {
      const rules = policy.tools.files;
      if (!rules.enabled) throw new AppError('policy.tool_denied', `policy ${policy.name} disables the file tools`, { details: { tool: name } });
      if (kind === 'runs-code' && !policy.tools.exec.enabled) {
        throw new AppError('policy.tool_denied', `${name} runs git, which runs commands a repository configures; policy ${policy.name} disables exec`, { details: { tool: name } });
      }
      const args = schema.parse(raw);
      const path = posix.normalize(args.path).replace(/(.)\/+$/, '$1');
      const roots = policy.filesystem.writableRoots.map((r) => r.path);
      if (!roots.some((r) => path === r || path.startsWith(`${r}/`))) {
        throw new AppError('input.path_outside_workspace', `${args.path} is outside the sandbox's file roots (${roots.join(', ')})`, { details: { field: 'args.path', path: args.path, roots } });
      }
      const accesses: CallJob['accesses'] = kind === 'read' ? [{ kind: 'path', path, mode: 'read' }] : [{ kind: 'all' }];
      return { args: { ...args, path }, accesses, timeoutMs: rules.defaultTimeoutMs, maxOutputBytes: policy.tools.exec.maxOutputBytes };
    },
  };
}

export const TOOLS: ReadonlyMap<string, ToolDefinition> = new Map(
  [
    exec,
    fileTool('read_file', 'read', 'Reads a window of lines of a text file (or a binary file as base64), with the sha256 of the whole file.'),
    fileTool('write_file', 'write', 'Writes a file atomically; expectedSha256 makes it a compare-and-swap, createOnly refuses to replace.'),
    fileTool('edit_file', 'write', 'Replaces an exact string in a text file (once, or everywhere with replaceAll), keeping line endings and BOM.'),
    fileTool('list_files', 'read', 'Lists a directory tree, sorted and bounded; symlinks are listed, not followed.'),
    fileTool('glob', 'read', 'Finds paths matching a glob pattern under a directory, bounded; symlinks are not followed.'),
    fileTool('search', 'read', 'Searches file contents with ripgrep (regex or literal), bounded matches with file and line.'),
    fileTool('git_status', 'runs-code', 'The work tree state from git status --porcelain=v2: staged, unstaged, untracked, conflicted.'),
    fileTool('git_diff', 'runs-code', 'The unified diff of the work tree or the index, bounded.'),
  ].map((t) => [t.name, t]),
);

/** The public description of every tool, input schemas as JSON Schema (draft 2020-12). */
export function describeTools(): Array<{ name: string; version: string; description: string; effectClasses: string[]; inputSchema: unknown }> {
  return [...TOOLS.values()].map((t) => ({
    name: t.name,
    version: t.version,
    description: t.description,
    effectClasses: t.effectClasses,
    inputSchema: z.toJSONSchema(t.inputSchema, { io: 'input', unrepresentable: 'any' }),
  }));
}
