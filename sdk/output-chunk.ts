/** A chunk of a command's output as `onOutput` gets it (sandbox.ts `exec`, sessions.ts). */

/** A chunk of a command's output, exactly as it was written (a chunk may split a UTF-8 sequence). */
export interface OutputChunk {
  stream: 'stdout' | 'stderr';
  /** Position of the chunk's first byte within its stream. */
  offset: number;
  data: Buffer;
}
