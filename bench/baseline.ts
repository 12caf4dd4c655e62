/**
 * The raw Docker Engine API side of every comparison (dockerode, the same library the control
 * plane's runtime uses), against the same image and, after the cold-start figure, the very
 * containers sbx leased — same limits, same filesystems. Everything made here carries the
 * bench's `sbx.owner` label, so the final sweep removes it.
 */
import { Writable } from 'node:stream';
import Docker from 'dockerode';
import * as tarStream from 'tar-stream';

/** Collects or discards an exec's output, counting bytes. */
class Sink extends Writable {
  bytes = 0;
  constructor(private readonly onData?: (chunk: Buffer) => void) {
    super();
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.bytes += chunk.length;
    this.onData?.(chunk);
    done();
  }
}

export interface ExecOutcome {
  exitCode: number | null;
  stdoutBytes: number;
  stderrBytes: number;
}

/**
 * Runs `cmd` in `container` the way `docker exec` does: exec create, exec start (attached,
 * stdout/stderr demultiplexed) until the stream ends, exec inspect for the exit code.
 * `onStdout` sees every stdout chunk.
 */
export async function dockerExec(
  docker: Docker,
  container: string,
  cmd: string[],
  options: { user?: string; onStdout?: (chunk: Buffer) => void } = {},
): Promise<ExecOutcome> {
  const exec = await docker
    .getContainer(container)
    .exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, User: options.user ?? '1000' });
  const stream = await exec.start({ hijack: true, stdin: false });
  const stdout = new Sink(options.onStdout);
  const stderr = new Sink();
  await new Promise<void>((resolve, reject) => {
    docker.modem.demuxStream(stream, stdout, stderr);
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', reject);
  });
  const info = (await exec.inspect()) as { ExitCode: number | null };
  return { exitCode: info.ExitCode, stdoutBytes: stdout.bytes, stderrBytes: stderr.bytes };
}

/** `dockerExec`, throwing unless the command exited 0. */
export async function dockerExecOk(
  docker: Docker,
  container: string,
  cmd: string[],
  options: { user?: string; onStdout?: (chunk: Buffer) => void } = {},
): Promise<ExecOutcome> {
  const outcome = await dockerExec(docker, container, cmd, options);
  if (outcome.exitCode !== 0) throw new Error(`baseline exec ${cmd.join(' ')} in ${container} exited ${outcome.exitCode}`);
  return outcome;
}

/**
 * The cold-start baseline: create and start a container of `image` (no network, running
 * `sleep infinity` instead of the agent), then exec `true` until it succeeds — a process inside
 * answered. Returns the container id (the caller removes it, untimed).
 */
export async function createStartReady(docker: Docker, image: string, labels: Record<string, string>): Promise<string> {
  const container = await docker.createContainer({
    Image: image,
    Entrypoint: ['sleep'],
    Cmd: ['infinity'],
    Labels: labels,
    NetworkDisabled: true,
    HostConfig: { NetworkMode: 'none' },
  });
  await container.start();
  for (let attempt = 0; ; attempt += 1) {
    try {
      await dockerExecOk(docker, container.id, ['true']);
      return container.id;
    } catch (err) {
      if (attempt >= 50) throw err;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/**
 * A tar (in memory) of `files` (name → content), owned by uid/gid 1000 like the tool user's
 * files, with an entry for every parent directory first (so no extractor makes one as root).
 */
export async function tarOf(files: Iterable<[string, Buffer]>): Promise<Buffer> {
  const pack = tarStream.pack();
  const chunks: Buffer[] = [];
  pack.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    pack.once('end', resolve);
    pack.once('error', reject);
  });
  const dirs = new Set<string>();
  for (const [name, content] of files) {
    const parts = name.split('/').slice(0, -1);
    for (let i = 1; i <= parts.length; i += 1) {
      const dir = parts.slice(0, i).join('/');
      if (dirs.has(dir)) continue;
      dirs.add(dir);
      pack.entry({ name: `${dir}/`, type: 'directory', mode: 0o755, uid: 1000, gid: 1000 });
    }
    await new Promise<void>((resolve, reject) =>
      pack.entry({ name, size: content.length, mode: 0o644, uid: 1000, gid: 1000 }, content, (err) => (err ? reject(err) : resolve())),
    );
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** The first regular file's bytes in a tar stream (what getArchive answers for one file). */
export async function firstFileOf(archive: NodeJS.ReadableStream): Promise<Buffer> {
  const extract = tarStream.extract();
  let found: Buffer | undefined;
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const parts: Buffer[] = [];
      stream.on('data', (c: unknown) => parts.push(c as Buffer));
      stream.on('end', () => {
        if (header.type === 'file' && !found) found = Buffer.concat(parts);
        next();
      });
      stream.resume();
    });
    extract.once('finish', resolve);
    extract.once('error', reject);
  });
  archive.pipe(extract);
  await done;
  if (!found) throw new Error('the archive held no file');
  return found;
}

/** Removes every container and volume labelled `sbx.owner=<owner>`; returns how many containers. */
export async function removeOwned(docker: Docker, owner: string): Promise<number> {
  const filters = JSON.stringify({ label: [`sbx.owner=${owner}`] });
  const containers = await docker.listContainers({ all: true, filters });
  await Promise.allSettled(containers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true })));
  const volumes = (await docker.listVolumes({ filters })).Volumes ?? [];
  await Promise.allSettled(volumes.map((v) => docker.getVolume(v.Name).remove()));
  const networks = await docker.listNetworks({ filters });
  await Promise.allSettled(networks.map((n) => docker.getNetwork(n.Id).remove()));
  return containers.length;
}
