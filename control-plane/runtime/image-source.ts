/**
 * A never-started container of a sandbox's image (`sbx-<lease>-seed`, labelled with the lease and
 * `sbx.role=seed`, so teardown and reconcile reap it), made on first use: the engine's archive
 * API reads the image through it (mount-targets.ts, seed-roots.ts). A container that vanished
 * (pruned, reaped) answers every read 404, which reads as "no link" or "nothing there": `confirm`
 * tells such a read from a true one before anything is concluded from it.
 */
import type Docker from 'dockerode';
import { AppError } from '../../contract/errors.js';
import { statusOf } from './docker-errors.js';
import { LABEL, ownershipLabels, type Ownership } from './runtime.js';

export class ImageSource {
  private container: Promise<Docker.Container> | null = null;
  private removed = false;

  constructor(
    private readonly docker: Docker,
    private readonly spec: { leaseId: string; image: string; pinnedImage?: string; ownership: Ownership },
  ) {}

  /** The image ID what is read is recorded under (image-survey.ts), or null when the image was not pinned to one. */
  get imageId(): string | null {
    const pinned = this.spec.pinnedImage;
    return pinned?.startsWith('sha256:') ? pinned : null;
  }

  /** The source container, created on the first call. Throws once `remove` was called (nothing is made again). */
  get(): Promise<Docker.Container> {
    if (this.removed) return Promise.reject(new Error(`the image source of ${this.spec.leaseId} was removed`));
    this.container ??= this.docker.createContainer({
      name: `sbx-${this.spec.leaseId}-seed`,
      Image: this.spec.pinnedImage ?? this.spec.image,
      // Never started: an entrypoint only because the engine refuses a container without a command.
      Entrypoint: ['/nonexistent/sbx-image-source'],
      Cmd: [],
      Labels: { [LABEL.lease]: this.spec.leaseId, [LABEL.role]: 'seed', ...ownershipLabels(this.spec.ownership) },
      NetworkDisabled: true,
      HostConfig: { NetworkMode: 'none' },
    });
    return this.container;
  }

  /**
   * Throws AppError `lease.create_failed` when the source container is gone (what was read
   * through it may be a vanished container's 404s, not the image's answer).
   */
  async confirm(): Promise<void> {
    const made = this.container;
    if (made === null) return;
    try {
      await (await made).inspect();
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
      throw new AppError('lease.create_failed', `the container reading image ${this.spec.image} vanished while it was read`, {
        details: { image: this.spec.image },
        cause: err,
      });
    }
  }

  /** Removes the source container if one was made (errors ignored: teardown reaps it by label). */
  async remove(): Promise<void> {
    this.removed = true;
    const made = this.container;
    this.container = null;
    if (made === null) return;
    await made.then((c) => c.remove({ force: true })).catch(() => undefined);
  }
}
