/**
 * The writable roots of a snapshot (snapshot-image.ts), archived on the engine's host: one tar
 * file per root under `<snapshot dir>/<image hex>/`, beside the snapshot image (which holds the
 * container's changed files), written by the host's GNU tar straight from the sandbox's mount.
 *
 * Why not through Docker: a root is a tmpfs (a volume's or the container's), which `docker
 * commit` skips; moving its bytes through the engine (an exec's output, or the archive API) ran
 * at about 50 MB/s here, and committing them as an image layer cost another tar, hash and untar
 * of every byte (bench row `snapshot`: 0.1× of `docker commit` plus a tar of the volume). A tar
 * on the host reads the mount at memory speed, and the file is written once.
 *
 * How the host reaches a root, safely: the control plane runs as root on the engine's host (as
 * for persistent volumes, volume-disks.ts). It opens `/proc/<sandbox pid>/root<path>` as a
 * directory (O_NOFOLLOW) and checks that what it opened is on the device that the sandbox's
 * mount table (`/proc/<pid>/mountinfo`) has mounted at `<path>`: a symlink the sandbox planted
 * on the way (resolved against the host's root, not the sandbox's) cannot pass for the mount.
 * The tar then runs as the tool user (`setpriv`, no capabilities, no new privileges) on that open
 * directory (`/proc/self/fd/3`), so it reads no more than the tool user may: a file the tool
 * user cannot read fails the capture (`snapshot.capture_failed`), as a tar in the sandbox did.
 * GNU tar archives symlinks as symlinks (it never follows them when creating). The host's tar
 * and setpriv run, never a program of the sandbox's image. Names and owners are numeric.
 *
 * Content address: each archive's SHA-256 is computed while it is written; the snapshot's digest
 * covers its image id and these (snapshot-image.ts).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import { open, readFile, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { AppError } from '../../contract/errors.js';
import type { RunAs } from './runtime.js';
import { parseMountinfo } from './mountinfo.js';

/** One root's archive: the file it was written to (in the capture's directory), its SHA-256 (hex) and its size in bytes. */
export interface RootArchive {
  path: string;
  file: string;
  sha256: string;
  sizeBytes: number;
}

/** Stderr kept of the host tar, bytes. */
const STDERR_MAX_BYTES = 64 * 1024;

/** The file name of root `path`'s archive in a snapshot's directory (`%2Fworkspace.tar`). */
export function rootArchiveName(path: string): string {
  return `${encodeURIComponent(path)}.tar`;
}

/** The directory of snapshot image `ref` (`sbx-snapshot:<hex>`) under `snapshotDir`; null for another ref. */
export function snapshotDirOf(snapshotDir: string, ref: string): string | null {
  const m = /^sbx-snapshot:([a-f0-9]{64})$/.exec(ref);
  return m ? join(snapshotDir, m[1]!) : null;
}

/**
 * Archives each of `roots` of the sandbox whose init has host pid `pid` into `dir` (made by the
 * caller), as `user`, one after another. Throws `snapshot.capture_failed` (`details.path`): not
 * a mount of the sandbox, unreadable content, a tar or disk failure.
 */
export async function archiveRoots(pid: number, roots: readonly string[], user: RunAs, dir: string): Promise<RootArchive[]> {
  const mounts = deviceByMountPoint(await readFile(`/proc/${pid}/mountinfo`, 'utf8'));
  const archives: RootArchive[] = [];
  for (const path of roots) archives.push(await archiveRoot(pid, mounts, path, user, join(dir, rootArchiveName(path))));
  return archives;
}

async function archiveRoot(pid: number, mounts: Map<string, number>, path: string, user: RunAs, file: string): Promise<RootArchive> {
  const fail = (message: string, extra: Record<string, unknown> = {}, cause?: unknown): AppError =>
    new AppError('snapshot.capture_failed', `archiving the writable root ${path} failed: ${message}`, {
      details: { path, ...extra },
      ...(cause === undefined ? {} : { cause }),
    });
  const device = mounts.get(path);
  if (device === undefined) throw fail('it is not a mount of the sandbox');
  let dirFd;
  try {
    dirFd = await open(`/proc/${pid}/root${path}`, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    throw fail(`cannot open it: ${(err as Error).message}`, {}, err);
  }
  try {
    if ((await dirFd.stat()).dev !== device) throw fail('what its path leads to is not the mount of the sandbox');
    // The tar writes the file itself (no byte passes through node); the hash reads it back from the page cache.
    const out = await open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    let exitCode: number;
    let stderr = '';
    try {
      const child = spawn(
        'setpriv',
        [
          `--reuid=${user.uid}`,
          `--regid=${user.gid}`,
          '--clear-groups',
          '--no-new-privs',
          '--',
          'tar',
          '-c',
          '-f',
          '-',
          '--numeric-owner',
          '-C',
          '/proc/self/fd/3',
          '--',
          '.',
        ],
        { stdio: ['ignore', out.fd, 'pipe', dirFd.fd], env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LC_ALL: 'C' } },
      );
      child.stderr!.on('data', (chunk: Buffer) => {
        if (stderr.length < STDERR_MAX_BYTES) stderr += chunk.toString('utf8');
      });
      exitCode = await new Promise<number>((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : -1)));
      });
    } catch (err) {
      throw fail(`the host's tar did not run: ${(err as Error).message}`, {}, err);
    } finally {
      await out.close();
    }
    // GNU tar exits 1 when a file changed while it was read: the sandbox runs on (not consistent, by design).
    if (exitCode !== 0 && exitCode !== 1) {
      const text = stderr.trim();
      throw fail(text.split('\n')[0] || `tar exited ${exitCode}`, { stderr: text.slice(0, 2000) });
    }
    const hash = createHash('sha256');
    let sizeBytes = 0;
    for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
      hash.update(chunk);
      sizeBytes += chunk.length;
    }
    return { path, file, sha256: hash.digest('hex'), sizeBytes };
  } finally {
    await dirFd.close().catch(() => undefined);
  }
}

/**
 * Bytes in use on the filesystems of `roots` of the sandbox whose init has host pid `pid` (each
 * root is a tmpfs of its own: what it holds). An estimate. Throws when a root cannot be read.
 */
export async function rootsBytesInUse(pid: number, roots: readonly string[]): Promise<number> {
  if (!(pid > 0)) throw new Error('the sandbox is not running');
  const mounts = deviceByMountPoint(await readFile(`/proc/${pid}/mountinfo`, 'utf8'));
  let total = 0;
  for (const path of roots) {
    const at = `/proc/${pid}/root${path}`;
    // Where a planted symlink leads elsewhere, that filesystem's use is not the root's (its archive fails anyway).
    if ((await stat(at)).dev !== mounts.get(path)) continue;
    const fs = await statfs(at);
    total += (fs.blocks - fs.bfree) * fs.bsize;
  }
  return total;
}

/** Mount point → device number (`st_dev`) of the topmost mount there, from a mountinfo text (proc(5)). */
export function deviceByMountPoint(text: string): Map<string, number> {
  // Later lines are mounted over earlier ones at the same point.
  return new Map(parseMountinfo(text).map((m) => [m.mountPoint, makedev(m.major, m.minor)]));
}

/** glibc's makedev: the `st_dev` of device major:minor. */
function makedev(major: number, minor: number): number {
  return (major & 0xfff) * 256 + (minor & 0xff) + (minor & ~0xff) * 4096 + Math.floor(major / 0x1000) * 2 ** 32 * 0x1000;
}
