/**
 * Input to a terminal's pseudo-terminal, bounded. Bytes are written to the pty's master fd (non-
 * blocking) in order; when the kernel's buffer is full (EAGAIN: the program is not reading) the
 * writer waits on a timer that backs off to `MAX_BACKOFF_MS`, instead of retrying on every turn
 * of the event loop as node-pty's own writer does (a terminal whose program never read its input
 * kept the agent spinning on a core). At most `maxPendingBytes` wait; what arrives beyond them is
 * dropped and counted — as a real terminal discards type-ahead its full input buffer cannot take
 * — so the agent's memory is bounded whatever a client sends.
 */
import { write } from 'node:fs';

/** Longest wait between two attempts at a full pty, ms. */
const MAX_BACKOFF_MS = 50;

export class PtyInput {
  private readonly queue: Buffer[] = [];
  private pendingBytes = 0;
  private writing = false;
  private timer: NodeJS.Timeout | null = null;
  private backoffMs = 1;
  private closed = false;
  /** Bytes dropped because `maxPendingBytes` were waiting already. */
  droppedBytes = 0;

  /** `fd`: the pty's master; `maxPendingBytes`: bytes that may wait for the program to read them. */
  constructor(
    private readonly fd: number,
    private readonly maxPendingBytes: number,
  ) {}

  /** Queues `data` after everything written before it; what does not fit under the bound is dropped. */
  write(data: Buffer): void {
    if (this.closed || data.length === 0) return;
    const room = Math.max(0, this.maxPendingBytes - this.pendingBytes);
    const kept = data.length > room ? data.subarray(0, room) : data;
    this.droppedBytes += data.length - kept.length;
    if (kept.length === 0) return;
    this.queue.push(kept);
    this.pendingBytes += kept.length;
    this.pump();
  }

  /** Stops writing (the program exited): what waits is let go. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.queue.length = 0;
    this.pendingBytes = 0;
  }

  private pump(): void {
    const head = this.queue[0];
    if (this.closed || this.writing || this.timer || !head) return;
    this.writing = true;
    write(this.fd, head, 0, head.length, null, (err, written) => {
      this.writing = false;
      if (this.closed) return;
      if (err) {
        // Anything but a full buffer (EIO, EBADF) means the terminal is gone: nothing more can be written.
        if (err.code !== 'EAGAIN') return this.close();
        this.timer = setTimeout(() => {
          this.timer = null;
          this.pump();
        }, this.backoffMs);
        this.backoffMs = Math.min(MAX_BACKOFF_MS, this.backoffMs * 2);
        return;
      }
      this.backoffMs = 1;
      this.pendingBytes -= written;
      if (written >= head.length) this.queue.shift();
      else this.queue[0] = head.subarray(written);
      this.pump();
    });
  }
}
