/**
 * Artifacts from the CLI: `sbx artifact ID ARTIFACT_ID` (its bytes to stdout), and the rest of an
 * output stream `sbx exec` and `sbx run` printed only the head of. A call's live output carries
 * the first `keptBytes` of each stream (its `maxOutputBytes`, 4 MiB by default); the whole
 * stream is the artifact its result names (`truncation.<stream>.fullArtifact`). The CLI writes
 * what follows the head from that artifact, so `sbx exec … > out` holds everything the program
 * wrote, as a local command's redirect would, and says on stderr when it cannot.
 */
import { createHash } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import type { Command } from 'commander';
import type { StreamTruncation, ToolResult } from '../contract/objects.js';
import { connect, type ConnectionOptions, type OutputChunk, type SbxClient } from '../sdk/index.js';
import { EXIT_PLATFORM_ERROR } from './exit-status.js';

type ArtifactReader = Pick<SbxClient, 'artifact'>;

/** Adds `sbx artifact` to `program`; `connection()` reads the global options when it runs. */
export function addArtifactCommand(program: Command, connection: () => ConnectionOptions): void {
  program
    .command('artifact')
    .description(
      "write an artifact's bytes to stdout, checked against its sha256 (a call's whole output past what its result kept: its truncation names it)",
    )
    .argument('<id>', 'sandbox id')
    .argument('<artifactId>', 'artifact id (art_…)')
    .action(async (id: string, artifactId: string) => {
      const client = connect(connection());
      const stream = await client.artifact(id, artifactId);
      const copied = await copyArtifact(client, id, artifactId, 0, process.stdout, stream);
      const problem = 'error' in copied ? `reading it failed: ${copied.error}` : mismatch(copied.sha256, stream.sha256);
      if (problem === null) return;
      process.stderr.write(`sbx: artifact ${artifactId}: ${problem}\n`);
      process.exitCode = EXIT_PLATFORM_ERROR;
    });
}

/**
 * A call's output printed as `sbx exec`, `sbx run` and `sbx session exec` print it: `onOutput`
 * writes each live chunk's raw bytes to this process's stdout or stderr and counts them;
 * `printRest` then writes each cut stream's rest from there (`writeCutOutput`).
 */
export function liveOutput(): {
  onOutput: (chunk: OutputChunk) => void;
  printRest: (client: ArtifactReader, leaseId: string, result: ToolResult, signal?: AbortSignal) => Promise<boolean>;
} {
  const printed = { stdout: 0, stderr: 0 };
  const sinks = { stdout: process.stdout, stderr: process.stderr };
  return {
    onOutput: (chunk) => {
      printed[chunk.stream] += chunk.data.length;
      sinks[chunk.stream].write(chunk.data);
    },
    printRest: (client, leaseId, result, signal) => writeCutOutput(client, leaseId, result, printed, sinks, signal),
  };
}

/** Where each stream's rest goes, and where notices go. */
export interface CutOutputSinks {
  stdout: Writable;
  stderr: Writable;
}

/**
 * Writes to `sinks` the bytes of each cut stream of `result` past those printed from its live
 * output (`printed`, bytes per stream; its kept head), read from its artifact of lease `leaseId`
 * and checked against its sha256 (the receipt's, else the one the control plane serves it
 * with). Stops at `signal` (Ctrl-C). Returns false when a stream's rest could not be written
 * whole (no artifact, a failed read, a digest that does not match, an artifact cut at the
 * sandbox's spool cap, an abort): each case but the abort is said on `sinks.stderr`.
 */
export async function writeCutOutput(
  client: ArtifactReader,
  leaseId: string,
  result: ToolResult,
  printed: Record<'stdout' | 'stderr', number>,
  sinks: CutOutputSinks,
  signal?: AbortSignal,
): Promise<boolean> {
  let whole = true;
  for (const stream of ['stdout', 'stderr'] as const) {
    const cut = result.truncation?.[stream];
    if (!cut || signal?.aborted) {
      whole &&= !cut;
      continue;
    }
    whole =
      (await writeRest(client, leaseId, result, cut, printed[stream], sinks[stream], signal, (text) => {
        sinks.stderr.write(`sbx: ${stream} was cut at ${cut.keptBytes} of ${cut.originalBytes} bytes; ${text}\n`);
      })) && whole;
  }
  return whole;
}

async function writeRest(
  client: ArtifactReader,
  leaseId: string,
  result: ToolResult,
  cut: StreamTruncation,
  printed: number,
  sink: Writable,
  signal: AbortSignal | undefined,
  say: (text: string) => void,
): Promise<boolean> {
  const artifactId = cut.fullArtifact;
  if (artifactId === null) {
    say('no artifact holds the rest');
    return false;
  }
  const copied = await copyArtifact(client, leaseId, artifactId, printed, sink, undefined, signal);
  if ('error' in copied) {
    if (!signal?.aborted) say(`reading the rest from artifact ${artifactId} failed: ${copied.error}`);
    return false;
  }
  const expected = result.receipt?.artifacts?.find((a) => a.id === artifactId)?.sha256 ?? copied.served;
  const wrong = mismatch(copied.sha256, expected);
  if (wrong !== null) {
    say(`artifact ${artifactId}: ${wrong}: what was written past the head may be wrong`);
    return false;
  }
  if (cut.artifactTruncated) {
    say(`the sandbox kept only its first ${copied.bytes} bytes (its spool cap): bytes past ${Math.max(copied.bytes, printed)} are lost`);
    return false;
  }
  return true;
}

/** Why bytes with sha256 `got` are not artifact bytes served with `expected` (null: they are; an unknown digest cannot be checked). */
function mismatch(got: string, expected: string | null | undefined): string | null {
  if (expected === null || expected === undefined) return 'it came without a sha256 to check it against';
  return got === expected ? null : `it arrived with sha256 ${got}, not ${expected}`;
}

/** How many times a read cut short is made again, when the one before moved bytes: a reader paused past the idle limit still gets everything. */
const MAX_READS = 5;

/**
 * Copies artifact `artifactId` of lease `leaseId` from byte `from` on into `sink` (`first`: an
 * answer already open), hashing all of it. A read that breaks after moving bytes is made again
 * and skips what `sink` has. Never throws: a failure (or `signal`) is `{ error }`.
 */
async function copyArtifact(
  client: ArtifactReader,
  leaseId: string,
  artifactId: string,
  from: number,
  sink: Writable,
  first?: Readable & { sha256: string | null },
  signal?: AbortSignal,
): Promise<{ sha256: string; bytes: number; served: string | null } | { error: string }> {
  let written = from;
  let opened = first;
  for (let read = 1; ; read += 1) {
    const hash = createHash('sha256');
    let offset = 0;
    const before = written;
    let stream: (Readable & { sha256: string | null }) | undefined;
    // Ctrl-C stops a read waiting for bytes (the wait for the reader ends with it: drainedOrStopped).
    const onAbort = (): void => void stream?.destroy();
    try {
      stream = opened ?? (await client.artifact(leaseId, artifactId));
      opened = undefined;
      signal?.addEventListener('abort', onAbort, { once: true });
      for await (const chunk of stream) {
        if (signal?.aborted) return { error: 'interrupted' };
        const bytes = chunk as Buffer;
        hash.update(bytes);
        const rest = bytes.subarray(Math.max(0, Math.min(bytes.length, written - offset)));
        offset += bytes.length;
        if (rest.length === 0) continue;
        written += rest.length;
        if (!sink.write(rest)) await drainedOrStopped(sink, signal);
        if (sink.destroyed) return { error: 'the output was closed' };
        if (signal?.aborted) return { error: 'interrupted' };
      }
      return { sha256: hash.digest('hex'), bytes: offset, served: stream.sha256 };
    } catch (err) {
      if (read >= MAX_READS || written === before || signal?.aborted) return { error: err instanceof Error ? err.message : String(err) };
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }
}

/** Resolves when `sink` drains or closes, or `signal` aborts, leaving no listener behind (a paused reader makes many such waits on one stdout). */
function drainedOrStopped(sink: Writable, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      sink.off('drain', done);
      sink.off('close', done);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    if (signal?.aborted) return done();
    sink.on('drain', done);
    sink.on('close', done);
    signal?.addEventListener('abort', done, { once: true });
  });
}
