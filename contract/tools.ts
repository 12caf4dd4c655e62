/**
 * The tools, declared once (one spec per tool in `tools/`): the control plane validates,
 * authorizes and queues calls by these specs, the agent runs them by the same ones.
 */
import { z } from 'zod';
import { editFileSpec } from './tools/edit-file.js';
import { execSpec } from './tools/exec.js';
import { makeDirSpec, moveSpec, removeSpec, statSpec } from './tools/fs-ops.js';
import { gitDiffSpec, gitStatusSpec } from './tools/git.js';
import { globSpec, listFilesSpec, searchSpec } from './tools/listing.js';
import { listProcessesSpec, signalProcessSpec } from './tools/processes.js';
import { readFileSpec } from './tools/read-file.js';
import { sessionStartSpec } from './tools/session.js';
import type { ToolSpec } from './tools/spec.js';
import { terminalSpec } from './tools/terminal.js';
import { writeFileSpec } from './tools/write-file.js';

export { EnvMap, EnvName, EnvValue, MAX_ARG_BYTES, SandboxPath, Sha256Hex } from './tools/common.js';
export { EditFileArgs } from './tools/edit-file.js';
export { ExecArgs } from './tools/exec.js';
export { MakeDirArgs, MoveArgs, RemoveArgs, StatArgs } from './tools/fs-ops.js';
export { GitDiffArgs, GitStatusArgs } from './tools/git.js';
export { GlobArgs, ListFilesArgs, SearchArgs } from './tools/listing.js';
export { ListProcessesArgs, ProcessInfo, SignalName, SignalProcessArgs, SIGNAL_NAMES } from './tools/processes.js';
export { ReadFileArgs } from './tools/read-file.js';
export { Access, EffectClass, runsCode, writesFiles, type LimitsSection, type ToolSpec } from './tools/spec.js';
export { SessionId, SessionStartArgs } from './tools/session.js';
export { WriteFileArgs } from './tools/write-file.js';

/**
 * Every tool the agent runs, in the order `GET /v1/tools` lists them; the `internal` ones
 * (started by their own routes) are not listed there and not submitted as plain calls.
 */
export const TOOL_SPECS = [
  execSpec,
  readFileSpec,
  writeFileSpec,
  editFileSpec,
  listFilesSpec,
  globSpec,
  searchSpec,
  gitStatusSpec,
  gitDiffSpec,
  removeSpec,
  moveSpec,
  makeDirSpec,
  statSpec,
  listProcessesSpec,
  signalProcessSpec,
  sessionStartSpec,
  terminalSpec,
] as const;
/** The tools the agent runs itself on the process table (not the tool-user worker's operations). */
export const PROCESS_TOOLS = ['list_processes', 'signal_process'] as const;
export type ProcessToolName = (typeof PROCESS_TOOLS)[number];
export type ToolName = (typeof TOOL_SPECS)[number]['name'];
export const ToolName = z.enum(TOOL_SPECS.map((s) => s.name) as [ToolName, ...ToolName[]]);

type SpecOf<N extends ToolName> = Extract<(typeof TOOL_SPECS)[number], { name: N }>;
/** A tool's spec by name. */
export const TOOL_SPEC: { readonly [N in ToolName]: SpecOf<N> } = Object.fromEntries(TOOL_SPECS.map((s) => [s.name, s])) as never;
/** A tool's argument schema by name. */
export const TOOL_ARGS: { readonly [N in ToolName]: SpecOf<N>['args'] } = Object.fromEntries(
  TOOL_SPECS.map((s) => [s.name, s.args]),
) as never;

/** Whether clients may submit the tool as a plain call (and see it in `GET /v1/tools`): not `internal`. */
export const isOfferedAsCall = (spec: Pick<ToolSpec, 'internal'>): boolean => spec.internal === undefined;
