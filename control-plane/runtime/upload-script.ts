/**
 * The shell scripts an upload and a download run inside the sandbox (`sh -c`, as the tool user,
 * on the agent runtime's busybox and GNU tar), and the reading of their complaints. An upload is
 * all-or-nothing: tar unpacks into a staging directory in the volume root (the same filesystem as the target, so every later step is a
 * rename), every staged entry is checked against what is already there, and only then is the
 * staged tree renamed into place. The staging directory is removed on every exit of the script;
 * only a script killed outright (the container or the exec gone) can leave a
 * `.sbx-upload.XXXXXX` directory behind in the volume root.
 */
import { AppError } from '../../contract/errors.js';

/** Refusal of a path that resolves outside the root `$2` (exit 3; `tarError` maps it). */
export const REFUSE_OUTSIDE = 'echo "$1: resolves outside $2" >&2; exit 3';

/**
 * Upload into `$2/$3` (`$3` relative to the root `$2`; `$1` the full path, for messages). The
 * paths are positional arguments, never spliced into the script.
 *
 * 1. From the root, each existing component of the target is entered one by one with `cd -P`
 *    and refused when it is a symlink (nothing lands outside the root) or a non-directory
 *    (a type conflict). Missing components are left for the end.
 * 2. tar unpacks stdin into the staging directory (`--no-same-owner`: entries belong to the tool
 *    user whatever the archive says).
 * 3. `walk check` visits every staged entry: a directory over an existing non-directory, or a
 *    non-directory over an existing directory, is a type conflict (exit 4, nothing moved); an
 *    existing directory the tool user cannot write is refused before anything moves.
 * 4. `walk commit` renames each staged entry into place (`mv -T`: over an existing file or
 *    symlink, never into the directory a symlink points to), merging into directories that
 *    exist; a staged directory with nothing in its place moves whole, in one rename. The
 *    missing components of the target are staged too (`t/<rest>`), so a missing target is one
 *    rename, and two uploads creating the same missing parent at once merge instead of failing.
 *
 * Staged directories get u+rwx so the walks can read them and move entries out of them.
 */
export const UPLOAD_SCRIPT = `
conflict() { printf 'sbx-upload: type conflict: %s: %s\\n' "$1" "$2" >&2; exit 4; }
denied() { printf 'sbx-upload: %s: Cannot open: Permission denied\\n' "$1" >&2; exit 2; }
walk() {
  local s n d r
  for s in "$2"/* "$2"/.[!.]* "$2"/..?*; do
    [ -e "$s" ] || [ -L "$s" ] || continue
    n=\${s##*/}; d=$3/$n; r=$4$n
    if [ -d "$s" ] && [ ! -L "$s" ]; then
      if [ -d "$d" ]; then
        [ -w "$d" ] && [ -x "$d" ] || denied "$d"
        walk "$1" "$s" "$d" "$r/" || exit $?
        continue
      fi
      if [ -e "$d" ] || [ -L "$d" ]; then conflict "$r" 'a directory in the archive, not a directory in the sandbox'; fi
    elif [ -d "$d" ] && [ ! -L "$d" ]; then
      conflict "$r" 'not a directory in the archive, a directory in the sandbox'
    fi
    [ "$1" = check ] || mv -f -T -- "$s" "$d" || exit 2
  done
}
cd -P -- "$2" || exit 2
root=$PWD
IFS=/; set -f
rest=
for c in $3; do
  [ -n "$c" ] || continue
  if [ -n "$rest" ]; then rest=$rest/$c; continue; fi
  if [ -L "$c" ]; then ${REFUSE_OUTSIDE}; fi
  if [ -d "$c" ]; then cd -P -- "$c" || exit 2; continue; fi
  if [ -e "$c" ]; then printf 'sbx-upload: target conflict: %s\\n' "$PWD/$c" >&2; exit 4; fi
  rest=$c
done
unset IFS; set +f
target=$PWD
[ -w . ] && [ -x . ] || denied "$target"
staging=$(mktemp -d -- "$root/.sbx-upload.XXXXXX") || exit 2
trap 'find "$staging" -type d -exec chmod u+rwx {} + 2>/dev/null; rm -rf -- "$staging"' EXIT
trap 'exit 129' HUP INT TERM
mkdir -p -- "$staging/t/$rest" || exit 2
tar -x -f - --no-same-owner -C "$staging/t/$rest" || exit 2
find "$staging" -type d -exec chmod u+rwx {} + || exit 2
walk check "$staging/t" "$target" ''
walk commit "$staging/t" "$target" ''
`;

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
 * Both scripts (the upload's is in `upload-script.ts`) run under `sh -c` with the paths as
 * positional arguments (never spliced into the script). They work from directories entered with
 * `cd -P` (symlinks resolved) and checked against the root `$2` by where they really are (`$PWD`
 * after `cd -P`); the working directory then stays put even if a path is swapped for a symlink a
 * moment later. Names are taken with parameter expansion, not `$(...)`, which would drop
 * trailing newlines of a name.
 *
 * Download `$1`: its directory is entered and checked; the last component is archived as it is
 * (tar stores a symlink as a symlink, without following it). A missing or unreadable path is
 * refused before tar writes its first block.
 */
export const DOWNLOAD_SCRIPT = [
  'dir=${1%/*}; name=${1##*/}',
  'cd -P -- "${dir:-/}" || { echo "$1: Cannot stat: No such file or directory" >&2; exit 2; }',
  `case "\${PWD%/}/$name" in "$2"|"$2"/*) ;; *) ${REFUSE_OUTSIDE} ;; esac`,
  'if [ ! -e "$name" ] && [ ! -L "$name" ]; then echo "$1: Cannot stat: No such file or directory" >&2; exit 2; fi',
  'if [ ! -L "$name" ] && [ ! -r "$name" ]; then echo "$1: Cannot open: Permission denied" >&2; exit 2; fi',
  'exec tar -c -f - -- "$name"',
].join('\n');

/**
 * Maps GNU tar's complaint to an error code. tar reports the OS reason as text
 * (`Cannot open: Permission denied`, `Read-only file system`, ...): strerror(3) wording.
 */
export function tarError(stderr: string, path: string): AppError {
  const reason = stderr.split('\n').find((l) => l.trim()) ?? 'tar failed';
  const details = { path, reason };
  if (/resolves outside/.test(stderr))
    return new AppError('input.path_outside_workspace', `${path} resolves outside its root in the sandbox (a symlink)`, { details });
  if (/No space left on device/.test(stderr))
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
