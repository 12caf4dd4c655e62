/**
 * Artifacts the agent holds until the control plane has fetched them (contract/transfers.ts,
 * op `artifact`): an artifact's bytes leave the sandbox on a transfer tunnel, never through the
 * return stream, which carries only its `artifact_ready` (size, sha256). A file is let go (its
 * `release`: removed, its spool budget given back) once the control plane says it stored it,
 * or asks for it to be discarded; a fetch cut short leaves it held for the next one.
 */
import { bytesPassed } from '../output/buffer-reclaim.js';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type net from 'node:net';
import { ARTIFACT_STORED_LINE, TRANSFER_FRAME, TRANSFER_STDERR_MAX_BYTES, type TransferEnd } from '../../contract/transfers.js';
import { writeFrame } from './frames.js';

/** A file handed over as an artifact; `release` removes it once the control plane has it. */
export interface HeldFile {
  path: string;
  release(): Promise<void>;
}

/** How much of the file one DATA frame carries, bytes (well under TRANSFER_FRAME_MAX_BYTES). */
const READ_BYTES = 256 * 1024;

export class ArtifactShelf {
  private readonly held = new Map<string, HeldFile>();

  /** Holds `file` as artifact `artifactId` until it is fetched or discarded. */
  hold(artifactId: string, file: HeldFile): void {
    this.held.set(artifactId, file);
  }

  /** Stops holding `artifactId` without releasing it (its offer failed; the offerer releases it). */
  forget(artifactId: string): void {
    this.held.delete(artifactId);
  }

  /** Artifacts held now (for tests and the log). */
  get size(): number {
    return this.held.size;
  }

  /**
   * Answers one `artifact` op on `tunnel` (its `PreviewDialed` line already written): the file
   * in DATA frames and an END, then waits for ARTIFACT_STORED_LINE before letting it go. Never
   * throws; a failure is the END's exit code and reason.
   */
  async serve(tunnel: net.Socket, artifactId: string, discard: boolean): Promise<void> {
    const file = this.held.get(artifactId);
    if (!file) {
      end(tunnel, { exitCode: 2, signal: null, stderr: `the agent holds no artifact ${artifactId}` });
      return;
    }
    if (discard) {
      this.held.delete(artifactId);
      await file.release().catch(() => undefined);
      end(tunnel, { exitCode: 0, signal: null, stderr: '' });
      return;
    }
    const stored = storedSaid(tunnel);
    try {
      for await (const chunk of createReadStream(file.path, { highWaterMark: READ_BYTES })) {
        if (tunnel.destroyed) return;
        bytesPassed((chunk as Buffer).length);
        if (!writeFrame(tunnel, TRANSFER_FRAME.data, chunk as Buffer)) await new Promise<void>((resolve) => tunnel.once('drain', resolve));
      }
    } catch (err) {
      end(tunnel, { exitCode: 1, signal: null, stderr: String((err as Error).message).slice(0, TRANSFER_STDERR_MAX_BYTES) });
      return;
    }
    writeFrame(tunnel, TRANSFER_FRAME.end, Buffer.from(JSON.stringify({ exitCode: 0, signal: null, stderr: '' } satisfies TransferEnd)));
    if (!(await stored)) return;
    // Only the fetch that saw it stored lets it go: a second fetch meanwhile finds it gone and says so.
    if (this.held.get(artifactId) === file) {
      this.held.delete(artifactId);
      await file.release().catch(() => undefined);
    }
    tunnel.end();
  }
}

/** The size (bytes) and sha256 (hex) of the file at `path`, read once. */
export async function digestOf(path: string): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: READ_BYTES })) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { size, sha256: hash.digest('hex') };
}

/** Writes the END frame and closes the tunnel once it is flushed. */
function end(tunnel: net.Socket, transferEnd: TransferEnd): void {
  writeFrame(tunnel, TRANSFER_FRAME.end, Buffer.from(JSON.stringify(transferEnd)));
  tunnel.end(() => tunnel.destroy());
}

/** Whether the control plane writes ARTIFACT_STORED_LINE before the tunnel closes. */
function storedSaid(tunnel: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    let said = '';
    const onData = (chunk: Buffer): void => {
      said += chunk.toString('latin1');
      if (said.length >= ARTIFACT_STORED_LINE.length) {
        tunnel.off('data', onData);
        resolve(said.startsWith(ARTIFACT_STORED_LINE));
      }
    };
    tunnel.on('data', onData);
    tunnel.once('close', () => resolve(false));
  });
}
