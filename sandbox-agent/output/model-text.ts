/**
 * The text a model reads of a command's output: short, with the start and the real end of long
 * output. Pure; the receipt and the artifacts hold the whole.
 */
import type { StreamSummary } from './output-pipeline.js';

/** Characters of each stream's head and of its tail in the model text. */
const MODEL_TEXT_HEAD_CHARS = 2000;
const MODEL_TEXT_TAIL_CHARS = 2000;
/**
 * Bytes decoded for a head: a character is at most 4 bytes of UTF-8, so this many hold the
 * head's characters whole (a character cut at the end lands past them); kept output up to
 * it is decoded whole. More is never decoded: the kept bytes may be megabytes.
 */
const MODEL_TEXT_DECODE_BYTES = 4 * (MODEL_TEXT_HEAD_CHARS + MODEL_TEXT_TAIL_CHARS);

/**
 * The text a model reads: a headline, then each stream whole when short, else its head, how
 * many bytes were left out, and its tail (from the bytes the pipeline kept of the stream's
 * end, so the tail is the real end even past the kept limit). Cuts fall between characters.
 */
export function modelTextOf(headline: string, out: StreamSummary, err: StreamSummary): string {
  const parts = [headline];
  for (const [name, s] of [
    ['stdout', out],
    ['stderr', err],
  ] as const) {
    if (s.bytes === 0) continue;
    const whole = s.kept.subarray(0, MODEL_TEXT_DECODE_BYTES).toString('utf8');
    if (
      s.keptBytes === s.bytes &&
      s.kept.length <= MODEL_TEXT_DECODE_BYTES &&
      whole.length <= MODEL_TEXT_HEAD_CHARS + MODEL_TEXT_TAIL_CHARS
    ) {
      parts.push(`${name}:\n${whole}`);
      continue;
    }
    const head = cutAt(whole, MODEL_TEXT_HEAD_CHARS);
    const tailText = s.tail.toString('utf8');
    const tail = tailText.slice(safeStart(tailText, tailText.length - MODEL_TEXT_TAIL_CHARS));
    const omitted = s.bytes - Buffer.byteLength(head) - Buffer.byteLength(tail);
    parts.push(`${name} (${s.bytes} bytes):\n${head}\n[... ${omitted} bytes omitted ...]\n${tail}`);
  }
  return parts.join('\n');
}

/** `s` cut to at most `n` UTF-16 units without splitting a surrogate pair. */
function cutAt(s: string, n: number): string {
  if (s.length <= n) return s;
  return s.slice(0, (s.charCodeAt(n) & 0xfc00) === 0xdc00 ? n - 1 : n);
}

/** `i` moved forward off the second half of a surrogate pair. */
function safeStart(s: string, i: number): number {
  const at = Math.max(0, i);
  return (s.charCodeAt(at) & 0xfc00) === 0xdc00 ? at + 1 : at;
}
