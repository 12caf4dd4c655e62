/**
 * The sbx TypeScript SDK.
 *
 *   await using sbx = await Sandbox.create({ policy: 'default', ttlSeconds: 600 });
 *   const result = await sbx.exec('npm test', { onStdout: (t) => process.stdout.write(t) });
 *
 * `Sandbox` is one leased sandbox (exec, files, git, renew, release); `SbxClient` is the HTTP API
 * route by route; `SbxError` carries the platform's error `code` and `retryability`.
 */
export { Sandbox, SandboxFiles, SandboxGit, connect, type ConnectionOptions, type ExecOptions, type OutputChunk } from './sandbox.js';
export {
  SbxClient,
  type BuildImageOptions,
  type CreateSandboxOptions,
  type ToolDescription,
  type PendingCall,
  type SbxClientOptions,
  type SubmitCallOptions,
  type UploadSummary,
  type VolumesApi,
} from './client.js';
export { Image, type ImageBuildOptions } from './images.js';
export { SandboxSessions, Session, type SessionExecOptions } from './sessions.js';
export type { SessionView } from '../contract/tools/session.js';
export { SandboxTerminals, Terminal, TerminalView, type CreateTerminalOptions } from './terminals.js';
export { SandboxPorts } from './previews.js';
export type { PreviewEvent, PreviewUrl } from '../contract/previews.js';
export { SbxError } from './errors.js';
export type {
  EditFileData,
  GitDiffData,
  GitStatusData,
  ListFilesData,
  MakeDirData,
  MoveData,
  ReadFileData,
  RemoveData,
  StatData,
  WriteFileData,
} from './tool-data.js';
export { SandboxProcesses, type ProcessInfo, type ProcessList, type SignalName, type SignalSent } from './processes.js';
export type { ChangesPage, FileWatch, WatchEvent, WatchOptions } from './watch.js';
export type { ChangeEntry, FileChange, WatchOverflow } from '../contract/watch.js';
export type { CallEvent } from '../contract/events.js';
export type { ErrorCode, ErrorInfo, Retryability } from '../contract/errors.js';
export type { CallView, EffectReceipt, Lease, ToolResult } from '../contract/objects.js';
export type { Volume, VolumeList } from '../contract/volumes.js';
export type { ImageEvent, ImageView } from '../contract/images.js';
export type { Snapshot } from '../contract/snapshots.js';
