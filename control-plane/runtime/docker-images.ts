/**
 * Images on the engine: their config (`inspectImage`), and small files read out of one without
 * running it (`readImageFiles`: a container is created, never started, the file is copied out
 * through the archive API, and the container is removed), used to resolve an image's `User` by
 * name from its `/etc/passwd` and `/etc/group`.
 */
import type Docker from 'dockerode';
import { extract } from 'tar-stream';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { statusOf, unavailable } from './docker-errors.js';
import { ownershipLabels, type ImageConfig, type Ownership } from './runtime.js';

const StringList = z.array(z.string()).nullable().default(null);
const ImageInspect = z.object({
  Id: z.string(),
  RepoDigests: z.array(z.string()).nullable().default([]),
  Config: z
    .object({
      Env: StringList,
      WorkingDir: z.string().nullable().default(''),
      User: z.string().nullable().default(''),
      Labels: z.record(z.string(), z.string()).nullable().default({}),
      Entrypoint: StringList,
      Cmd: StringList,
    })
    .nullable()
    .default(null),
});

/** The image `ref` as the engine has it (`SandboxRuntime.inspectImage`). Throws `image.not_found`, `runtime.unavailable`. */
export async function inspectImage(docker: Docker, ref: string): Promise<ImageConfig> {
  let inspected: unknown;
  try {
    inspected = await docker.getImage(ref).inspect();
  } catch (err) {
    const status = statusOf(err);
    // 404: no such image; 400: not a valid reference. Either way the client must name another.
    if (status === 404 || status === 400)
      throw new AppError('image.not_found', `image ${ref} is not on this Docker engine`, {
        details: { field: 'image', image: ref },
        cause: err,
      });
    throw unavailable('inspect image', err);
  }
  return imageConfigOf(inspected);
}

/** The ImageConfig of an engine's image inspect document (`GET /images/{name}/json`). Throws ZodError when it is not one. */
export function imageConfigOf(document: unknown): ImageConfig {
  const inspected = ImageInspect.parse(document);
  const config = inspected.Config;
  const env: Record<string, string> = {};
  for (const entry of config?.Env ?? []) {
    const at = entry.indexOf('=');
    if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return {
    id: inspected.Id,
    env,
    workingDir: config?.WorkingDir || null,
    user: config?.User || null,
    labels: config?.Labels ?? {},
    entrypoint: config?.Entrypoint ?? null,
    cmd: config?.Cmd ?? null,
    repoDigests: inspected.RepoDigests ?? [],
  };
}

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
