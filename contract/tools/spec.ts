/**
 * What a tool is, declared once for both sides: the control plane validates, authorizes and
 * queues a call by its spec (control-plane/calls/tools.ts), the agent runs it by the same spec
 * (sandbox-agent/tools/). docs/DESIGN.md §2, ToolDefinition.
 */
import { z } from 'zod';

/**
 * What a call touches, for the agent's scheduler (sandbox-agent/execution/scheduler.ts):
 * `all` (it may touch anything: it runs code), or one path read or written. The control
 * plane declares paths lexically normalized; the agent resolves them to canonical paths before
 * it schedules the call (sandbox-agent/execution/accesses.ts).
 */
export const Access = z.union([
  z.object({ kind: z.literal('all') }),
  z.object({ kind: z.literal('path'), path: z.string(), mode: z.enum(['read', 'write']) }),
]);
export type Access = z.infer<typeof Access>;

/**
 * What running a tool may do. `process`: runs programs (exec; git, which runs the filters a
 * repository configures) — needs the policy's exec enabled, touches `all`, and the tool user's
 * leftover processes are swept afterwards. `fs.write`: changes files — interrupted, its effect
 * is `unknown`, never "nothing". `fs.read`: reads files. `process.read`: reads the sandbox's
 * process table. `process.signal`: signals a running process (starts no program, sweeps nothing).
 */
export const EffectClass = z.enum(['process', 'fs.read', 'fs.write', 'process.read', 'process.signal']);
export type EffectClass = z.infer<typeof EffectClass>;

/**
 * Which policy section sets a tool's limits: `exec` (`policy.tools.exec`: enabled,
 * defaultTimeoutMs, maxTimeoutMs, maxOutputBytes) or `files` (`policy.tools.files`: enabled,
 * defaultTimeoutMs; output bytes as exec's).
 */
export type LimitsSection = 'exec' | 'files';

/** One tool: its identity, its input contract, its effects and how its accesses follow from its args. */
export interface ToolSpec<Args = unknown, Name extends string = string> {
  readonly name: Name;
  readonly version: string;
  /** One line for a person or a model choosing a tool (served by `GET /v1/tools` and MCP). */
  readonly description: string;
  /** Input schema; parsing fills the defaults. */
  readonly args: z.ZodType<Args, unknown>;
  readonly effectClasses: readonly EffectClass[];
  readonly limits: LimitsSection;
  /** What a call with these (parsed, normalized) args touches. */
  accesses(args: Args): Access[];
  /**
   * Set for a tool that is not offered to clients as a plain call: its own route starts it
   * (`startedBy`, e.g. `POST /v1/sandboxes/:id/terminals`), which checks what the route owns
   * first (a limit, an id). Such a tool is left out of `GET /v1/tools` (and so of MCP), and
   * `POST .../calls` refuses it (`400 input.invalid` naming `startedBy`); the agent runs it like
   * any other. Unset: a plain tool.
   */
  readonly internal?: { readonly startedBy: string };
}

/** Whether a tool runs programs (effect class `process`). */
export const runsCode = (spec: Pick<ToolSpec, 'effectClasses'>): boolean => spec.effectClasses.includes('process');
/** Whether a tool changes files (effect class `fs.write`). */
export const writesFiles = (spec: Pick<ToolSpec, 'effectClasses'>): boolean => spec.effectClasses.includes('fs.write');

/**
 * The spec of a file tool, whose args carry a `path`: a reader declares a read of it, a writer
 * a write of it, and a tool that runs code touches `all`. The path is lexical; the agent
 * resolves it to a canonical one before scheduling (sandbox-agent/execution/accesses.ts).
 */
export function fileToolSpec<const Name extends string, Args extends { path: string }>(
  spec: Omit<ToolSpec<Args, Name>, 'accesses' | 'version' | 'limits'>,
): ToolSpec<Args, Name> {
  const mode = writesFiles(spec) ? 'write' : 'read';
  return {
    ...spec,
    version: '1',
    limits: 'files',
    accesses: (args) => (runsCode(spec) ? [{ kind: 'all' }] : [{ kind: 'path', path: args.path, mode }]),
  };
}
