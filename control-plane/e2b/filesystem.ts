/**
 * envd's `filesystem.Filesystem` service and its `/files` endpoint over sbx's file tools (issue
 * 17 part 1): each operation is one call (`stat`, `make_dir`, `move`, `list_files`, `remove`,
 * `read_file`, `write_file`) with its receipt, under the lease's policy and the tool user's
 * rights. A tool's error becomes the Connect code the SDK maps: `files.not_found` → `not_found`
 * (its FileNotFoundError), other input errors → `invalid_argument`.
 */
import { posix } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { ToolResult } from '../../contract/objects.js';
import type { CallService } from '../calls/service.js';
import type { LeaseRecord } from '../leases/store.js';
import { ConnectError } from './connect.js';
import type { EntryInfo, FileType } from './schema.js';

/** How long one file operation may take, ms. */
const FILE_CALL_WAIT_MS = 120_000;

export interface E2bFilesystemDeps {
  calls: Pick<CallService, 'submit' | 'waitFinished'>;
}

const FILE_TYPES: Record<string, FileType> = { file: 'FILE_TYPE_FILE', directory: 'FILE_TYPE_DIRECTORY', symlink: 'FILE_TYPE_SYMLINK' };

/** The error a failed file call is to an E2B client. */
function failureOf(result: ToolResult): ConnectError {
  const code = result.error?.code ?? result.status;
  const message = `${code}: ${result.error?.message ?? result.status}`;
  if (code === 'files.not_found') return new ConnectError('not_found', message);
  if (code === 'files.exists') return new ConnectError('already_exists', message);
  if (result.status === 'denied') return new ConnectError('permission_denied', message);
  if (code.startsWith('files.') || code.startsWith('input.')) return new ConnectError('invalid_argument', message);
  if (result.status === 'timed_out') return new ConnectError('deadline_exceeded', message);
  return new ConnectError('unavailable', message);
}

export class E2bFilesystem {
  constructor(private readonly deps: E2bFilesystemDeps) {}

  /** Runs tool `tool` with `args` in `lease` and returns its `data`; throws the ConnectError of a failure. */
  private async run(lease: LeaseRecord, tool: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
    let call;
    try {
      ({ call } = await this.deps.calls.submit(lease, { tool, args }));
    } catch (err) {
      // Refused before anything ran (input, policy): the same codes as a failed result.
      if (err instanceof AppError) throw failureOf({ status: err.status === 403 ? 'denied' : 'failed', error: err.toInfo() } as ToolResult);
      throw err;
    }
    const view = await this.deps.calls.waitFinished(lease.id, call.callId, FILE_CALL_WAIT_MS, true);
    if (!view.result) throw new ConnectError('deadline_exceeded', `the ${tool} call did not finish in time`);
    if (view.result.status !== 'succeeded') throw failureOf(view.result);
    return view.result.data ?? {};
  }

  /** `Filesystem/Stat`. */
  async stat(lease: LeaseRecord, path: string): Promise<EntryInfo> {
    const d = await this.run(lease, 'stat', { path });
    return {
      name: posix.basename(String(d.path)),
      type: FILE_TYPES[String(d.type)] ?? 'FILE_TYPE_FILE',
      path: String(d.path),
      size: String(d.sizeBytes ?? 0),
      mode: Number(d.mode ?? 0),
      // ls's form, as envd answers it: the type's letter, then the permission bits.
      permissions: `${d.type === 'directory' ? 'd' : d.type === 'symlink' ? 'l' : '-'}${String(d.permissions ?? '').slice(-9)}`,
      owner: String(d.owner ?? ''),
      group: String(d.group ?? ''),
      modifiedTime: String(d.mtime ?? new Date(0).toISOString()),
      ...(typeof d.symlinkTarget === 'string' ? { symlinkTarget: d.symlinkTarget } : {}),
    };
  }

  /** `Filesystem/MakeDir` (with parents): `already_exists` when it was there. */
  async makeDir(lease: LeaseRecord, path: string): Promise<EntryInfo> {
    const d = await this.run(lease, 'make_dir', { path, parents: true });
    if (d.created === false) throw new ConnectError('already_exists', `${path} exists already`);
    return this.stat(lease, path);
  }

  /** `Filesystem/Move`: the entry at its new place. */
  async move(lease: LeaseRecord, source: string, destination: string): Promise<EntryInfo> {
    await this.run(lease, 'move', { path: source, destination });
    return this.stat(lease, destination);
  }

  /** `Filesystem/Remove` (recursive, as envd's). */
  async remove(lease: LeaseRecord, path: string): Promise<void> {
    await this.run(lease, 'remove', { path, recursive: true });
  }

  /** `Filesystem/ListDir` to `depth`: name, type, path and size of each entry (mode, owner and times are not listed; `stat` has them). */
  async listDir(lease: LeaseRecord, path: string, depth: number): Promise<EntryInfo[]> {
    const d = await this.run(lease, 'list_files', { path, depth });
    const entries = (d.entries as Array<{ path: string; type: string; size: number; target?: string }> | undefined) ?? [];
    return entries
      .filter((e) => FILE_TYPES[e.type] !== undefined)
      .map((e) => ({
        name: posix.basename(e.path),
        type: FILE_TYPES[e.type]!,
        path: e.path,
        size: String(e.size),
        mode: 0,
        permissions: '',
        owner: '',
        group: '',
        modifiedTime: new Date(0).toISOString(),
        ...(e.target !== undefined ? { symlinkTarget: e.target } : {}),
      }));
  }

  /** `GET /files`: the file's bytes. */
  async read(lease: LeaseRecord, path: string): Promise<Buffer> {
    const d = await this.run(lease, 'read_file', { path, encoding: 'base64' });
    return Buffer.from(String(d.content ?? ''), 'base64');
  }

  /** `POST /files`, one file: written whole (parents made), as envd answers it. */
  async write(lease: LeaseRecord, path: string, bytes: Buffer): Promise<{ name: string; type: 'file'; path: string }> {
    const d = await this.run(lease, 'write_file', { path, content: bytes.toString('base64'), encoding: 'base64' });
    const written = typeof d.path === 'string' ? d.path : path;
    return { name: posix.basename(written), type: 'file', path: written };
  }
}
