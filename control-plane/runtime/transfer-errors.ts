/**
 * The reading of the transfer scripts' complaints (contract/transfers.ts holds the scripts): a
 * type conflict of an upload, and GNU tar's words as an error code.
 */
import { AppError } from '../../contract/errors.js';

/**
 * `files.type_conflict` when the script reported one (`details`: `path` the upload's target,
 * `entry` the archive entry relative to it, or null when a component of the target itself is
 * a file, `reason`), else null.
 */
export function uploadConflict(stderr: string, path: string): AppError | null {
  const entry = /sbx-upload: type conflict: ([\s\S]*): ((?:a|not a) directory in the archive, [^\n]*)\n?$/.exec(stderr);
  if (entry) {
    return new AppError(
      'files.type_conflict',
      `upload into ${path}: entry ${JSON.stringify(entry[1])} is ${entry[2]}; nothing was written`,
      { details: { path, entry: entry[1], reason: entry[2] } },
    );
  }
  const target = /sbx-upload: target conflict: ([\s\S]*?)\n?$/.exec(stderr);
  if (target) {
    const reason = `${target[1]} is not a directory in the sandbox`;
    return new AppError('files.type_conflict', `upload into ${path}: ${reason}; nothing was written`, {
      details: { path, entry: null, reason },
    });
  }
  return null;
}

/**
 * Maps GNU tar's complaint to an error code. tar reports the OS reason as text
 * (`Cannot open: Permission denied`, `Read-only file system`, ...): strerror(3) wording.
 */
export function tarError(stderr: string, path: string): AppError {
  const reason = stderr.split('\n').find((l) => l.trim()) ?? 'tar failed';
  const details = { path, reason };
  if (/resolves outside/.test(stderr))
    return new AppError('input.path_outside_workspace', `${path} resolves outside its root in the sandbox (a symlink)`, { details });
  // A short write is how GNU tar words ENOSPC on tmpfs ("Wrote only 6656 of 10240 bytes"), with no strerror.
  if (/No space left on device|Disk quota exceeded|Wrote only \d+ of \d+ bytes/.test(stderr))
    return new AppError('files.no_space', `no space left in the sandbox writing ${path}: ${reason}`, { details });
  if (/Permission denied|Read-only file system|Operation not permitted|cannot create directory/.test(stderr)) {
    const os = /Read-only file system/.test(stderr) ? 'EROFS' : /Operation not permitted/.test(stderr) ? 'EPERM' : 'EACCES';
    return new AppError('files.permission_denied', `${os}: the sandbox user may not access ${path}: ${reason}`, {
      details: { ...details, errno: os },
    });
  }
  if (/No such file or directory|Cannot change to directory|Cannot stat/.test(stderr))
    return new AppError('files.not_found', `no such path in the sandbox: ${path}`, { details });
  return new AppError('files.transfer_failed', `tar in the sandbox failed for ${path}: ${reason}`, {
    details: { ...details, stderr: stderr.slice(0, 2000) },
  });
}
