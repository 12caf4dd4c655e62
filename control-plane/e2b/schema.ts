/**
 * The E2B wire formats sbx accepts, as its own zod schemas written from E2B's public protocol
 * definitions (the control API's OpenAPI document, envd's `process.proto` and
 * `filesystem.proto`, in their protobuf JSON mapping): field names camelCase, `bytes` as
 * base64, enums by name. Unknown fields are ignored, as the protobuf JSON mapping asks.
 */
import { z } from 'zod';

/** The envd version sbx reports: the clients' features that sbx serves are those of this version (multipart uploads, closeStdin). */
export const ENVD_VERSION = '0.5.7';

/** `POST /v2/sandboxes` (and `/sandboxes`, older 2.x clients). `timeout` in seconds. */
export const NewSandbox = z.object({
  templateID: z.string().min(1).max(128).default('base'),
  timeout: z.number().int().positive().optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  envVars: z.record(z.string(), z.string()).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** `POST /v2/sandboxes/:id/connect`: the new timeout, seconds. */
export const ConnectSandbox = z.object({ timeout: z.number().int().positive().optional() });

/** `POST /sandboxes/:id/timeout`: the sandbox's remaining life from now, seconds. */
export const SandboxTimeout = z.object({ timeout: z.number().int().positive() });

/** `GET /v2/sandboxes`: filters (metadata as the SDK encodes it: `k=v&k2=v2`, percent-encoded). */
export const ListSandboxesQuery = z.object({
  metadata: z.string().optional(),
  state: z.string().optional(),
  template: z.string().optional(),
  startedAfter: z.iso.datetime({ offset: true }).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  /** The offset of the next page (the previous answer's `x-next-token`). */
  nextToken: z
    .string()
    .regex(/^\d{1,9}$/, 'a token from x-next-token')
    .optional(),
});

const Base64 = z.string().regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'must be base64');

/** process.proto `ProcessConfig`. */
const ProcessConfig = z.object({
  cmd: z.string().min(1),
  args: z.array(z.string()).default([]),
  envs: z.record(z.string(), z.string()).default({}),
  cwd: z.string().optional(),
});
export type ProcessConfig = z.infer<typeof ProcessConfig>;

/** process.proto `PTY`. */
const Pty = z.object({ size: z.object({ cols: z.number().int().min(1).max(1000), rows: z.number().int().min(1).max(1000) }) });

/** process.proto `StartRequest`. */
export const StartRequest = z.object({
  process: ProcessConfig,
  pty: Pty.optional(),
  tag: z.string().optional(),
  stdin: z.boolean().optional(),
});
export type StartRequest = z.infer<typeof StartRequest>;

/** process.proto `ProcessSelector` (sbx answers by pid). */
const ProcessSelector = z.object({ pid: z.number().int().positive() });

export const ConnectRequest = z.object({ process: ProcessSelector });
export const SendInputRequest = z.object({
  process: ProcessSelector,
  input: z.union([z.object({ stdin: Base64 }), z.object({ pty: Base64 })]),
});
export const SendSignalRequest = z.object({ process: ProcessSelector, signal: z.enum(['SIGNAL_SIGTERM', 'SIGNAL_SIGKILL']) });
export const CloseStdinRequest = z.object({ process: ProcessSelector });
export const UpdateRequest = z.object({ process: ProcessSelector, pty: Pty });

/** filesystem.proto requests. */
export const PathRequest = z.object({ path: z.string().min(1).max(4096) });
export const ListDirRequest = z.object({ path: z.string().min(1).max(4096), depth: z.number().int().min(1).max(16).default(1) });
export const MoveRequest = z.object({ source: z.string().min(1).max(4096), destination: z.string().min(1).max(4096) });
export const WatchDirRequest = z.object({ path: z.string().min(1).max(4096), recursive: z.boolean().default(false) });

/** filesystem.proto `FileType` names. */
export type FileType = 'FILE_TYPE_FILE' | 'FILE_TYPE_DIRECTORY' | 'FILE_TYPE_SYMLINK';

/** filesystem.proto `EntryInfo`, as sbx answers it. */
export interface EntryInfo {
  name: string;
  type: FileType;
  path: string;
  /** int64: a decimal string in the JSON mapping. */
  size: string;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  /** RFC 3339. */
  modifiedTime: string;
  symlinkTarget?: string;
}
