/**
 * Artifacts from the CLI: `sbx artifact ID ARTIFACT_ID` (its bytes to stdout), and the rest of an
 * output stream `sbx exec` and `sbx run` printed only the head of. A call's live
 * output carries the first `keptBytes` of each stream (its `maxOutputBytes`, 4 MiB by default);
 * the whole stream is the artifact its result names (`truncation.<stream>.fullArtifact`). The
 * CLI writes what follows the head from that artifact, so `sbx exec … > out` holds everything
 * the program wrote, as a local command's redirect would, and says on stderr when it cannot.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import type { StreamTruncation, ToolResult } from '../contract/objects.js';
import { connect, type ConnectionOptions, type SbxClient } from '../sdk/index.js';

/** Adds `sbx artifact` to `program`; `connection()` reads the global options when it runs. */
export function addArtifactCommand(program: Command, connection: () => ConnectionOptions): void {
  program
    .command('artifact')
    .description("write an artifact's bytes to stdout (a call's whole output past what its result kept: its truncation names it)")
    .argument('<id>', 'sandbox id')
    .argument('<artifactId>', 'artifact id (art_…)')
    .action(async (id: string, artifactId: string) => {
      await pipeline(await connect(connection()).artifact(id, artifactId), process.stdout);
    });
}

/** Where each stream's rest goes, and where notices go. */
export interface CutOutputSinks {
  stdout: Writable;
  stderr: Writable;
}

/**
 * Writes to `sinks` the bytes of each cut stream of `result` past its kept head, read from its
 * artifact of lease `leaseId` and checked against its sha256 (the receipt's digest of the
 * artifact). Returns false when a stream's rest could not be written whole (no artifact, a
 * failed read, a digest that does not match, an artifact cut at the sandbox's spool cap): each
 * such case is said on `sinks.stderr` with the artifact's id.
 */
export async function writeCutOutput(
  client: Pick<SbxClient, 'artifact'>,
  leaseId: string,
  result: ToolResult,
  sinks: CutOutputSinks,
): Promise<boolean> {
  let whole = true;
  for (const stream of ['stdout', 'stderr'] as const) {
    const cut = result.truncation?.[stream];
    if (!cut) continue;
    whole = (await writeRest(client, leaseId, result, stream, cut, sinks)) && whole;
  }
  return whole;
}

async function writeRest(
  client: Pick<SbxClient, 'artifact'>,
  leaseId: string,
  result: ToolResult,
  stream: 'stdout' | 'stderr',
  cut: StreamTruncation,
  sinks: CutOutputSinks,
): Promise<boolean> {
  const say = (text: string): void =>
    void sinks.stderr.write(`sbx: ${stream} was cut at ${cut.keptBytes} of ${cut.originalBytes} bytes; ${text}\n`);
  if (cut.fullArtifact === null) {
    say('no artifact holds the rest');
    return false;
  }
  const expected = result.receipt?.artifacts?.find((a) => a.id === cut.fullArtifact)?.sha256;
  const sink = sinks[stream];
  const hash = createHash('sha256');
  let offset = 0;
  try {
    for await (const chunk of await client.artifact(leaseId, cut.fullArtifact)) {
      const bytes = chunk as Buffer;
      hash.update(bytes);
      // The head was printed from the live output: only what follows it is written here.
      const rest = bytes.subarray(Math.max(0, Math.min(bytes.length, cut.keptBytes - offset)));
      offset += bytes.length;
      if (rest.length > 0 && !sink.write(rest)) await once(sink, 'drain');
    }
  } catch (err) {
    say(`reading the rest from artifact ${cut.fullArtifact} failed: ${err instanceof Error ? err.message : String(err)}`);
    return false;
  }
  const digest = hash.digest('hex');
  if (expected !== undefined && digest !== expected) {
    say(
      `artifact ${cut.fullArtifact} arrived with sha256 ${digest}, not the receipt's ${expected}: what was written past the head may be wrong`,
    );
    return false;
  }
  if (cut.artifactTruncated) {
    say(`artifact ${cut.fullArtifact} holds only the first ${offset} (the sandbox's spool cap): the rest is lost`);
    return false;
  }
  return true;
}
