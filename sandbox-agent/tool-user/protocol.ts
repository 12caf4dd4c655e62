/**
 * Messages between the agent and its tool-user worker (Node IPC). The worker's replies are
 * parsed with zod: it runs as the tool user, whose code could tamper with a process of its own
 * uid, so the agent treats what it says as input.
 */
import { z } from 'zod';
import { ErrorCodeSchema } from '../../contract/errors.js';
import { TOOL_SPECS, type ProcessToolName, type ToolName } from '../../contract/tools.js';

/** The worker's operations: every tool under the `files` limits (all but exec, session_start and the process tools), by its spec's name. */
export type FileOpName = Exclude<ToolName, 'exec' | 'session_start' | 'terminal' | ProcessToolName>;
export const FILE_OPS: readonly FileOpName[] = TOOL_SPECS.filter((s) => s.limits === 'files').map((s) => s.name as FileOpName);

/** An operation to run, or (`cancel`) the id of one to stop: its child processes are killed. */
export type WorkerRequest = { id: number; op: FileOpName; args: unknown } | { cancel: number };

export const WorkerReply = z.discriminatedUnion('ok', [
  z.object({
    id: z.number(),
    ok: z.literal(true),
    result: z.object({
      data: z.record(z.string(), z.unknown()),
      versions: z.array(z.object({ path: z.string(), before: z.string().nullable(), after: z.string().nullable() })),
      modelText: z.string(),
    }),
  }),
  z.object({
    id: z.number(),
    ok: z.literal(false),
    error: z.object({ code: ErrorCodeSchema, message: z.string(), details: z.record(z.string(), z.unknown()).optional() }),
  }),
]);
export type WorkerReply = z.infer<typeof WorkerReply>;

/** How the worker is configured: its identity and what it may reach (argv, as JSON). */
export const WorkerConfig = z.object({
  uid: z.number().int(),
  gid: z.number().int(),
  home: z.string(),
  /** The PATH search and git are looked up on (the image's, else the default). */
  path: z.string(),
  roots: z.array(z.string()),
  maxFileBytes: z.number().int().positive(),
});
export type WorkerConfig = z.infer<typeof WorkerConfig>;
