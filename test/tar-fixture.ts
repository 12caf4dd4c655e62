/** Builds tar archives entry by entry (tar-stream), for tests that need exact or hostile headers. */
import * as tar from 'tar-stream';

export type FixtureEntry = Partial<tar.Header> & { name: string; content?: string };

export async function tarBytes(entries: FixtureEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const { content, ...header } of entries) pack.entry(header as tar.Header, content ?? '');
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}
