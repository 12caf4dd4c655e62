/**
 * Gives back the memory of bulk bytes the agent has passed on (program output, artifacts sent,
 * transfers relayed) as it goes, rather than in one late heap-wide collection.
 *
 * Why: every pipe or socket read is a fresh Buffer whose bytes live outside V8's heap until a GC
 * collects its small wrapper object. The wrappers fill the young generation slowly, so V8
 * collects them only when its external-memory trigger fires (64 MiB more than at the last
 * collection): a minimal Node reader of 200 MB of stdout (hash, spool) grew its RSS by 40 MiB,
 * the agent by 46–51 MiB (bench `stdout-stream`). A scavenge after every RECLAIM_EVERY_BYTES
 * frees them within that many bytes: the minimal reader then grew by 13 MiB (4 MiB steps) and
 * was no slower, the agent by 12–25 MiB over the bench's runs (2 MiB steps); a scavenge of a
 * heap of tiny wrappers takes well under a millisecond.
 *
 * The collector is V8's `gc`, which the agent's command line exposes (`--expose-gc`,
 * contract/agent-runtime.ts AGENT_COMMAND); without it (unit tests, another entry) this does nothing.
 */

/** Bytes passed on between two scavenges. */
export const RECLAIM_EVERY_BYTES = 2 * 1024 * 1024;

type Collect = (options: { type: 'minor' | 'major' }) => void;

const collect = (globalThis as { gc?: Collect }).gc;
let passedBytes = 0;

/** Counts `bytes` passed on; scavenges once RECLAIM_EVERY_BYTES have passed since the last one. */
export function bytesPassed(bytes: number): void {
  passedBytes += bytes;
  if (passedBytes < RECLAIM_EVERY_BYTES) return;
  passedBytes = 0;
  collect?.({ type: 'minor' });
}
