/**
 * The disks behind persistent volumes, on the engine's host: one ext4 filesystem per volume in an
 * image file of exactly `sizeBytes` under `<data dir>/volumes/<installation id>/`, loop-mounted on a directory
 * beside it and bind-mounted into the sandboxes that use the volume. The filesystem's size is the
 * limit: a writer past it gets ENOSPC from the kernel, whatever the sandbox does.
 *
 * Why not a Docker volume: the `local` driver makes unlimited volumes on the engine's disk, its
 * tmpfs volumes lose their content when unmounted, and on Docker 20.10 `type=ext4,o=loop` fails
 * (`loop` reaches mount(2) as an unknown option: "invalid argument"). So the control plane does
 * `mount -o loop` itself (root on the engine's host, in the engine's mount namespace) and the
 * container gets a bind mount; nothing of it is a Docker object, so label-based reaping of leases
 * (which lists containers, volumes and networks) can never touch it.
 *
 * What survives: the image file (the volume's content) survives everything but `DELETE`; the
 * loop mount survives control-plane restarts but not a host reboot, after which `ensureMounted`
 * mounts it again when a lease next needs it (ext4's journal replays what a crash cut short).
 */
import { execFile } from 'node:child_process';
import { chown, mkdir, readFile, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AppError } from '../../contract/errors.js';
import { parseMountinfo } from './mountinfo.js';

const run = promisify(execFile);

/** `$1` mount point, `$2` image: mount unless mounted (run under the image's flock). */
const MOUNT_SCRIPT = 'mountpoint -q -- "$1" || exec mount -t ext4 -o loop,nosuid,nodev,noatime -- "$2" "$1"';

/** How long one mkfs/mount/umount/fallocate may take, ms. */
const COMMAND_TIMEOUT_MS = 120_000;

export class LoopVolumeDisks {
  /** `root`: the directory holding the image files and mount points (`<data dir>/volumes/<installation id>`). */
  constructor(private readonly root: string) {}

  /** Where volume `id`'s image file and mount point are. */
  paths(id: string): { image: string; mountPoint: string } {
    return { image: join(this.root, `${id}.img`), mountPoint: join(this.root, id) };
  }

  /**
   * Makes volume `id`'s disk: a `sizeBytes` image file (allocated up front with fallocate, so the
   * host's disk cannot run out under it later; sparse where the filesystem cannot allocate), ext4
   * with no blocks reserved for root, mounted (nosuid, nodev), with an empty root owned by root.
   * Leaves nothing behind when it throws `policy.unenforceable` (this host cannot loop-mount:
   * not root, no loop devices, no mkfs.ext4) or `volume.create_failed` (no space, another failure).
   */
  async create(id: string, sizeBytes: number): Promise<void> {
    const { image, mountPoint } = this.paths(id);
    try {
      await mkdir(this.root, { recursive: true, mode: 0o700 });
      await run('fallocate', ['-l', String(sizeBytes), image], { timeout: COMMAND_TIMEOUT_MS }).catch(async (err: unknown) => {
        if (!/not supported/i.test(stderrOf(err))) throw err;
        await run('truncate', ['-s', String(sizeBytes), image], { timeout: COMMAND_TIMEOUT_MS });
      });
      await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'nodiscard,root_owner=0:0', image], { timeout: COMMAND_TIMEOUT_MS });
      await mkdir(mountPoint, { mode: 0o755 });
      await this.mount(id);
      // A fresh volume looks empty to the tools; e2fsck makes lost+found again if it ever needs one.
      await rmdir(join(mountPoint, 'lost+found'));
    } catch (err) {
      await this.destroy(id).catch(() => undefined);
      throw translate(err);
    }
  }

  /** Mounts volume `id`'s disk unless it is (after a host reboot it is not); returns the mount point. */
  async ensureMounted(id: string): Promise<string> {
    try {
      await this.mount(id);
    } catch (err) {
      throw translate(err);
    }
    return this.paths(id).mountPoint;
  }

  /** Gives the volume's root directory to `uid:gid` (the tool user of the lease that writes it); what is inside keeps its owners. */
  async setRootOwner(id: string, uid: number, gid: number): Promise<void> {
    await chown(this.paths(id).mountPoint, uid, gid);
  }

  /**
   * Unmounts and removes volume `id`'s disk. Absence is success. A sandbox container that still
   * has the filesystem mounted keeps it until it goes (the unmount here is lazy); its file is
   * gone from the host's directory at once.
   */
  async destroy(id: string): Promise<void> {
    const { image, mountPoint } = this.paths(id);
    if (await isMountPoint(mountPoint))
      await run('flock', ['--exclusive', image, 'umount', '-l', mountPoint], { timeout: COMMAND_TIMEOUT_MS });
    // rmdir, never rm -r: a mount point still mounted must not have its content deleted through it.
    await rmdir(mountPoint).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    await rm(image, { force: true });
  }

  /**
   * Mounts the image unless it is mounted, under an exclusive flock(2) of the image file: two
   * creates (in one process or two) that find it unmounted after a reboot must not both mount
   * it — `mount -o loop` would attach a second loop device, and two ext4 mounts of one image
   * corrupt it (seen on this host with two concurrent mounts).
   */
  private async mount(id: string): Promise<void> {
    const { image, mountPoint } = this.paths(id);
    if (await isMountPoint(mountPoint)) return;
    await run('flock', ['--exclusive', image, 'sh', '-c', MOUNT_SCRIPT, 'sbx-volume-mount', mountPoint, image], {
      timeout: COMMAND_TIMEOUT_MS,
    });
  }
}

/** Whether `path` is a mount point in this process's mount namespace (/proc/self/mountinfo). */
export async function isMountPoint(path: string): Promise<boolean> {
  return parseMountinfo(await readFile('/proc/self/mountinfo', 'utf8')).some((m) => m.mountPoint === path);
}

function stderrOf(err: unknown): string {
  const e = err as { stderr?: string; message?: string };
  return `${e.stderr ?? ''} ${e.message ?? ''}`;
}

function translate(err: unknown): AppError {
  if (err instanceof AppError) return err;
  const text = stderrOf(err).trim();
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' && /spawn/.test(text))
    return new AppError(
      'policy.unenforceable',
      `volumes need fallocate, mkfs.ext4, flock, mountpoint and mount on the engine's host: ${text}`,
      {
        details: { field: 'sizeBytes', reason: text },
        cause: err,
      },
    );
  if (/only root|permission denied|operation not permitted|failed to setup loop device|could not find any free loop/i.test(text))
    return new AppError(
      'policy.unenforceable',
      `the size of a volume cannot be enforced on this host (a loop-mounted ext4 image): ${text}`,
      {
        details: { field: 'sizeBytes', reason: text },
        cause: err,
      },
    );
  return new AppError('volume.create_failed', `the volume's disk could not be made: ${text}`, { details: { reason: text }, cause: err });
}
