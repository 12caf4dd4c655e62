/**
 * The control plane's tool registry: each tool's definition (name, version, input schema,
 * effect classes, accesses, limits) and its `resolve` step, which normalizes arguments and
 * applies the lease's policy before anything is queued (docs/DESIGN.md §3: validate → resolve →
 * authorize). `GET /v1/tools` serves these definitions.
 */
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { ExecArgs } from '../../contract/tools.js';
import type { Policy } from '../policies/schema.js';

/** The effect of a call, after normalization and policy. */
export interface ResolvedExecution {
  args: Record<string, unknown>;
  /** Effective timeout after policy, ms. */
  timeoutMs: number;
  /** Per-stream output bytes kept. */
  maxOutputBytes: number;
}

export interface ToolDefinition {
  name: string;
  version: string;
  description: string;
  /** What running the tool may do: `process` (runs code), `fs.read`, `fs.write`, `network`. */
  effectClasses: string[];
  inputSchema: z.ZodType;
  /** Parses args (throws ZodError) and authorizes them (throws AppError `policy.tool_denied`). */
  resolve(args: unknown, policy: Policy): ResolvedExecution;
  limits(policy: Policy): { defaultTimeoutMs: number; maxTimeoutMs: number; maxOutputBytes: number };
}

const exec: ToolDefinition = {
  name: 'exec',
  version: '1',
  description: 'Runs a program (argv) or a bash script (cmd) as the sandbox tool user in its own process group.',
  effectClasses: ['process', 'fs.read', 'fs.write'],
  inputSchema: ExecArgs,
  limits: (policy) => policy.tools.exec,
  resolve(raw, policy) {
    const rules = policy.tools.exec;
    if (!rules.enabled) throw new AppError('policy.tool_denied', `policy ${policy.name} disables exec`, { details: { tool: 'exec' } });
    const args = ExecArgs.parse(raw);
    const timeoutMs = args.timeoutMs ?? rules.defaultTimeoutMs;
    if (timeoutMs > rules.maxTimeoutMs) {
      throw new AppError('policy.tool_denied', `timeoutMs ${timeoutMs} is above the policy's maxTimeoutMs ${rules.maxTimeoutMs}`, {
        details: { tool: 'exec', field: 'args.timeoutMs', max: rules.maxTimeoutMs },
      });
    }
    return { args: { ...args, timeoutMs }, timeoutMs, maxOutputBytes: rules.maxOutputBytes };
  },
};

export const TOOLS: ReadonlyMap<string, ToolDefinition> = new Map([[exec.name, exec]]);

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
