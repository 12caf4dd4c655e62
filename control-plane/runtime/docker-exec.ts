/**
 * One command run in a container by `docker exec`, the way every transfer of the runtime runs
 * one (uploads and downloads, docker-runtime.ts; seeding writable roots, seed-roots.ts): stdout
 * demultiplexed into a stream, stdin fed from a stream when given, stderr kept up to a bound for
 * the error message, and the exit code once the output ends.
 */
import { PassThrough, Writable, type Readable } from 'node:stream';
import type Docker from 'dockerode';

/** Stderr kept of one exec, bytes: enough for tar's first errors, bounded whatever the command prints. */
export const EXEC_STDERR_MAX_BYTES = 64 * 1024;

/** What `execInContainer` runs, as whom, and what it feeds it. */
export interface ExecSpec {
  /** The container's name or id. */
  container: string;
  cmd: string[];
  /** `uid:gid`. */
  user: { uid: number; gid: number };
  /** `KEY=value` entries added to the container's environment. */
  env?: string[];
  /** Fed to the command's stdin; its end closes stdin (the command sees EOF). Null: no stdin. */
  stdin: Readable | null;
}

/** A started exec: `stdout` streams its output; `done` its exit code and stderr (trimmed, at most EXEC_STDERR_MAX_BYTES). */
export interface ExecRun {
  stdout: PassThrough;
  done: Promise<{ exitCode: number; stderr: string }>;
}

/**
 * Starts `spec.cmd` in the container (working directory `/`). Resolves once started. Throws the
 * engine's error as it is when the exec cannot be created or started (a 404: no running
 * container); `done` rejects with the stream's or the inspect's error as it is. Callers translate.
 */
export async function execInContainer(docker: Docker, spec: ExecSpec): Promise<ExecRun> {
  const exec = await docker.getContainer(spec.container).exec({
    Cmd: spec.cmd,
    User: `${spec.user.uid}:${spec.user.gid}`,
    ...(spec.env ? { Env: spec.env } : {}),
    AttachStdin: spec.stdin !== null,
    AttachStdout: true,
    AttachStderr: true,
    WorkingDir: '/',
  });
  const stream = (await exec.start({ hijack: true, stdin: spec.stdin !== null })) as unknown as NodeJS.ReadWriteStream;
  const stdout = new PassThrough();
  const stderrChunks: Buffer[] = [];
  let stderrBytes = 0;
  const stderr = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (stderrBytes < EXEC_STDERR_MAX_BYTES) {
        const kept = chunk.subarray(0, EXEC_STDERR_MAX_BYTES - stderrBytes);
        stderrChunks.push(kept);
        stderrBytes += kept.length;
      }
      cb();
    },
  });
  docker.modem.demuxStream(stream, stdout, stderr);
  if (spec.stdin) {
    spec.stdin.on('error', (err) => (stream as unknown as { destroy(e: Error): void }).destroy(err));
    // Ending the write side half-closes the hijacked connection: the command sees EOF on stdin.
    spec.stdin.pipe(stream as unknown as NodeJS.WritableStream);
  }
  const done = new Promise<{ exitCode: number; stderr: string }>((resolve, reject) => {
    stream.on('end', () => {
      stdout.end();
      exec
        .inspect()
        .then((info) => resolve({ exitCode: Number(info.ExitCode ?? -1), stderr: Buffer.concat(stderrChunks).toString('utf8').trim() }))
        .catch(reject);
    });
    stream.on('error', (err) => {
      // Without an error: nobody may be listening on stdout, and `done` carries the reason.
      stdout.destroy();
      reject(err);
    });
  });
  return { stdout, done };
}
