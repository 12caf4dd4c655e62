/**
 * Reads small files out of an image without running it: a container is created (never
 * started), the file is copied out through the archive API, and the container is removed. Used
 * to resolve an image's `User` by name from its `/etc/passwd` and `/etc/group`.
 */
import type Docker from 'dockerode';
import { extract } from 'tar-stream';
import { ownershipLabels, type Ownership } from './runtime.js';

/** Largest file read, bytes (a passwd file is a few KiB). */
const MAX_FILE_BYTES = 1024 * 1024;

/**
 * The contents of each of `paths` in image `ref` (null for one that is absent, not a regular
 * file or over MAX_FILE_BYTES). The short-lived container carries `ownership`'s labels, so a
 * crash between create and remove leaves nothing reconcile cannot find.
 */
export async function readImageFiles(docker: Docker, ref: string, paths: string[], ownership: Ownership): Promise<Array<string | null>> {
  const container = await docker.createContainer({
    Image: ref,
    // Never started: any command will do, and none of the image's runs.
    Entrypoint: ['/nonexistent'],
    Cmd: [],
    NetworkDisabled: true,
    Labels: ownershipLabels(ownership),
  });
  try {
    return await Promise.all(paths.map((path) => readOne(container, path)));
  } finally {
    await container.remove({ force: true, v: true }).catch(() => undefined);
  }
}

async function readOne(container: Docker.Container, path: string): Promise<string | null> {
  let archive: NodeJS.ReadableStream;
  try {
    archive = (await container.getArchive({ path })) as NodeJS.ReadableStream;
  } catch {
    return null;
  }
  return new Promise((resolve, reject) => {
    const parser = extract();
    let content: string | null = null;
    parser.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      let size = 0;
      stream.on('data', (c: unknown) => {
        if (!Buffer.isBuffer(c)) return;
        size += c.length;
        if (size <= MAX_FILE_BYTES) chunks.push(c);
      });
      stream.on('end', () => {
        if (content === null && header.type === 'file' && size <= MAX_FILE_BYTES) content = Buffer.concat(chunks).toString('utf8');
        next();
      });
      stream.resume();
    });
    parser.on('finish', () => resolve(content));
    parser.on('error', reject);
    archive.pipe(parser);
  });
}
