/**
 * File transfers through the agent (issue 14: bulk bytes leave the Redis job path). An upload
 * or a download is a byte stream between the control plane and the sandbox's agent on a tunnel
 * connection (contract/previews.ts: the lease's socket directory, the agent dialing out), never
 * a Redis message:
 *
 * 1. The control plane publishes a `TransferOpen` on the lease's `control` channel.
 * 2. The agent connects to `socket`, starts the op's script as the lease's tool user (its own
 *    config, never the message, says who that is) and writes one `PreviewDialed` line: `ok`, or
 *    `failed` with why the script could not start.
 * 3. `unpack`: the control plane writes the (checked, rewritten) tar and ends its side; the
 *    script's stdin is those bytes. `pack`: the script's stdout comes back in DATA frames.
 * 4. The agent ends with one END frame, the script's exit (`TransferEnd`), and closes.
 *
 * An `artifact` op runs no script: the agent sends the file it holds in DATA frames and an END
 * with exit code 0 (1 and the reason in `stderr` when it cannot read it; 2 when it holds no such
 * artifact). The control plane stores and records it, then writes ARTIFACT_STORED_LINE; only
 * then does the agent let the file go, so an artifact whose fetch is cut short is fetched again
 * from the redelivered `artifact_ready`. With `discard` the agent sends no DATA, lets the file
 * go and sends the END.
 *
 * A frame is a type byte, a 32-bit big-endian payload length, then the payload; at most
 * TRANSFER_FRAME_MAX_BYTES of payload. The scripts are fixed here, chosen by the op's kind; the
 * message carries only paths, which reach the script as positional arguments.
 */
import { z } from 'zod';
import { AGENT_RUNTIME_BUSYBOX, AGENT_RUNTIME_TOOLS } from './agent-runtime.js';
import { ArtifactId } from './objects.js';
import { PreviewConnId, PreviewSocketName } from './previews.js';

/** The name of an upload's completion mark: the archive's last entry (UPLOAD_SCRIPT step 2a); 128 random bits. */
export const TransferMark = z.string().regex(/^\.sbx-upload-complete\.[A-Za-z0-9_-]{22}$/);

/** A sandbox path as a transfer names it: absolute, no NUL. */
const SandboxPath = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^\/[^\0]*$/);

/**
 * What a transfer does: `unpack` a tar into `dir` (under the writable root `root`; `relative` is
 * `dir` relative to it, '' for the root itself) ending with completion mark `mark`; `pack`
 * `path` (under `root`) as a tar; or send the `artifact` the agent announced with
 * `artifact_ready` (contract/queue.ts), or, `discard`, only let it go (the control plane has it);
 * or print the canonical form of `path` (`realpath`: REALPATH_SCRIPT).
 */
export const TransferOp = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('unpack'),
    dir: SandboxPath,
    root: SandboxPath,
    relative: z
      .string()
      .max(4096)
      .regex(/^[^\0]*$/),
    mark: TransferMark,
  }),
  z.object({ kind: z.literal('pack'), path: SandboxPath, root: SandboxPath }),
  z.object({ kind: z.literal('realpath'), path: SandboxPath }),
  z.object({ kind: z.literal('artifact'), artifactId: ArtifactId, discard: z.boolean() }),
]);
export type TransferOp = z.infer<typeof TransferOp>;

/** Control plane → agent (`control` channel): run `op` on a new connection `connId` to tunnel socket `socket`. */
export const TransferOpen = z.object({
  type: z.literal('transfer_open'),
  connId: PreviewConnId,
  socket: PreviewSocketName,
  op: TransferOp,
});
export type TransferOpen = z.infer<typeof TransferOpen>;

/** Frame types, agent → control plane. */
export const TRANSFER_FRAME = { data: 1, end: 2 } as const;
/** Bytes of a frame's header: type (1) and payload length (4, big-endian). */
export const TRANSFER_FRAME_HEADER_BYTES = 5;
/** Largest frame payload, bytes: a reader refuses a longer frame as a broken stream. */
export const TRANSFER_FRAME_MAX_BYTES = 1024 * 1024;
/**
 * How long a transfer's bytes may stand still before the control plane gives up on it, ms
 * (`files.transfer_broken`): a script the sandbox stopped, an agent that hangs. An upload's
 * clock runs while its archive is sent, not while the script then moves the staged tree.
 */
export const TRANSFER_IDLE_TIMEOUT_MS = 60_000;

/** Control plane → agent after an `artifact` op's END: the artifact is stored and recorded. */
export const ARTIFACT_STORED_LINE = 'stored\n';
/** Most of a script's stderr an END frame carries, bytes. */
export const TRANSFER_STDERR_MAX_BYTES = 16 * 1024;

/** The END frame's payload (JSON): how the script ended: its exit code, or the signal that killed it, and its stderr (at most TRANSFER_STDERR_MAX_BYTES). */
export const TransferEnd = z.object({ exitCode: z.number().int().nullable(), signal: z.string().nullable(), stderr: z.string() });
export type TransferEnd = z.infer<typeof TransferEnd>;

/**
 * Runs a transfer script (the next argument, then its own `$0` and arguments) with the image's
 * `/bin/sh` when it has one, else the runtime's busybox sh: an image without a shell still
 * transfers files. The image's shell and tools first because with busybox sh and the runtime's
 * tools alone the upload fuzz (test/files-fuzz.test.ts) saw an archive accepted that the image's
 * dash and tar refused (which of the two differs is not pinned down yet).
 */
export const TRANSFER_SHELL = [
  AGENT_RUNTIME_BUSYBOX,
  'sh',
  '-c',
  `if [ -x /bin/sh ]; then exec /bin/sh -c "$@"; fi; exec ${AGENT_RUNTIME_BUSYBOX} sh -c "$@"`,
  'sbx-transfer',
];

/**
 * The environment's `TAR_OPTIONS` of an upload's script: GNU tar takes its options from there
 * before its own arguments (busybox tar, which has neither, ignores it). 1 MiB records (in
 * bytes: size suffixes need GNU tar 1.24), read whole from the pipe (what GNU tar does for
 * `-f -` anyway, stated), where tar by default reads 10 KiB at a time: a 100 MB tree piped into
 * the sandbox's GNU tar unpacked in 245–409 ms, with these in 107–130 ms (a file: 105 ms). An
 * archive cut short fails as it did (exit 2, unexpected EOF).
 */
export const UPLOAD_TAR_OPTIONS = '--record-size=1048576 --read-full-records';

/** The PATH of a transfer: the image's usual directories, then the runtime's tools. */
export const TRANSFER_PATH = `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${AGENT_RUNTIME_TOOLS}`;

/**
 * The shell scripts an upload and a download run inside the sandbox (as the tool user, with the
 * image's shell and tar first, the runtime's busybox and GNU tar otherwise). An upload is
 * all-or-nothing: tar unpacks into a staging directory in the volume root (the same filesystem
 * as the target, so every later step is a rename), the completion mark is checked, every staged
 * entry is checked against what is already there, and only then is the staged tree renamed into
 * place. The staging directory is removed on every exit of the script; only a script killed
 * outright (the container gone) can leave a `.sbx-upload.XXXXXX` directory behind in the volume root.
 */

/** Refusal of a path that resolves outside the root `$2` (exit 3; `tarError` maps it). */
export const REFUSE_OUTSIDE = 'echo "$1: resolves outside $2" >&2; exit 3';

/**
 * Upload into `$2/$3` (`$3` relative to the root `$2`; `$1` the full path, for messages; `$4`
 * the archive's completion mark, TransferOp `mark`). The paths are positional arguments, never
 * spliced into the script.
 *
 * 1. From the root, each existing component of the target is entered one by one with `cd -P`
 *    and refused when it is a symlink (nothing lands outside the root) or a non-directory
 *    (a type conflict). Missing components are left for the end.
 * 2. tar unpacks stdin into the staging directory (`--no-same-owner`: entries belong to the tool
 *    user whatever the archive says).
 * 2a. The archive must end with the completion mark, a regular file the control plane appends
 *    after the last entry it checked: a stream cut anywhere before it (a refused entry, a
 *    control plane gone) leaves tar content but no mark (exit 5, nothing moved). GNU tar takes
 *    an archive ending at an entry boundary without its end blocks as whole, so the mark, not
 *    tar's exit, says the archive arrived. It is checked after the staged directories got u+rwx
 *    (an archive whose root is read-only still has its mark removed). The mark guards against a
 *    cut stream, not against the sandbox's own code: that runs as the same user as the script,
 *    can read its arguments and the staged files, and could write the same files itself.
 * 3. `walk check` visits every staged entry: a directory over an existing non-directory (a
 *    symlink too, even to a directory: nothing is merged through a link the sandbox planted), or
 *    a non-directory over an existing directory, is a type conflict (exit 4, nothing moved); an
 *    existing directory the tool user cannot write is refused before anything moves.
 * 4. `walk commit` renames each staged entry into place (`mv -T`: over an existing file or
 *    symlink, never into the directory a symlink points to), merging into directories that
 *    exist; a staged directory with nothing in its place moves whole, in one rename. The
 *    missing components of the target are staged too (`t/<rest>`), so a missing target is one
 *    rename, and two uploads creating the same missing parent at once merge instead of failing.
 *
 * Staged directories get u+rwx so the walks can read them and move entries out of them.
 *
 * The staging directory goes on every exit: a signal (the agent ends a transfer the control
 * plane gave up with SIGTERM to the script's process group) becomes `exit 129`, and the removal
 * itself ignores signals, as its find and rm then do too: a second signal arriving while it
 * runs (the script already exiting when the agent's comes) would otherwise cut it short.
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
      if [ -d "$d" ] && [ ! -L "$d" ]; then
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
trap 'trap "" HUP INT TERM PIPE; find "$staging" -type d -exec chmod u+rwx {} + 2>/dev/null; rm -rf -- "$staging" 2>/dev/null' EXIT
trap 'exit 129' HUP INT TERM
mkdir -p -- "$staging/t/$rest" || exit 2
tar -x -f - --no-same-owner -C "$staging/t/$rest" || exit 2
find "$staging" -type d -exec chmod u+rwx {} + || exit 2
mark="$staging/t/$rest/$4"
if [ ! -f "$mark" ] || [ -L "$mark" ]; then echo 'sbx-upload: archive cut short' >&2; exit 5; fi
rm -f -- "$mark" || exit 2
walk check "$staging/t" "$target" ''
walk commit "$staging/t" "$target" ''
`;

/**
 * Both scripts run under `sh -c` with the paths as
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
 * Prints `$1` with symlinks resolved on its longest existing prefix and the missing rest
 * appended (what a file watch of a path not made yet watches), with no newline. Run as the tool
 * user: it resolves what that user can see. The runtime's busybox applets, whatever the image's
 * tools are (one without `readlink -f` would never resolve); exits 2 when not even `/` resolves.
 */
export const REALPATH_SCRIPT =
  `bb=${AGENT_RUNTIME_BUSYBOX}; p="$1"; rest=""; ` +
  'until r="$("$bb" readlink -f -- "$p" 2>/dev/null)" && [ -n "$r" ]; do ' +
  '[ "$p" = / ] && { echo "$1: cannot resolve" >&2; exit 2; }; ' +
  'rest="/$("$bb" basename -- "$p")$rest"; p="$("$bb" dirname -- "$p")"; done; r="${r%/}"; printf %s "${r:-/}$rest"';

/** A transfer op that runs a script. */
export type ScriptOp = Extract<TransferOp, { kind: 'unpack' | 'pack' | 'realpath' }>;

/** The argv (after TRANSFER_SHELL) that runs a script op. */
export function transferArgv(op: ScriptOp): string[] {
  if (op.kind === 'unpack') return [UPLOAD_SCRIPT, 'sbx-upload', op.dir, op.root, op.relative, op.mark];
  if (op.kind === 'pack') return [DOWNLOAD_SCRIPT, 'sbx-download', op.path, op.root];
  return [REALPATH_SCRIPT, 'sbx-realpath', op.path];
}
