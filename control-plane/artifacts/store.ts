/**
 * The artifact store. An artifact arrives whole from the sandbox's agent over a transfer tunnel
 * (`receive`, fetch.ts), checked against its size and sha256 as it is written. Agents before
 * that send it in chunks through the return stream (`writeChunk`, `complete`): each
 * chunk is checked against its sha256 and written at its own offset (chunk i at
 * i × ARTIFACT_CHUNK_BYTES), so chunks may be ledgered in any order or twice; the end message
 * completes the artifact only once every chunk is in and the whole file has the announced
 * size and sha256. Files live under `<data dir>/artifacts`; metadata in Redis (`ArtifactRecords`).
 *
 * Throws AppError `artifact.corrupt` (a chunk or the whole does not match its digest) and
 * `artifact.incomplete` (the end came before every chunk: a chunk was refused or dropped; the end is then dropped and logged, returns-in.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants, createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { AppError } from '../../contract/errors.js';
import { Artifact } from '../../contract/objects.js';
import { ARTIFACT_CHUNK_BYTES } from '../../contract/queue.js';
import type { Redis } from 'ioredis';

/**
 * What an artifact's file streams hold per read or before a write waits, bytes: with the
 * default 64 KiB (16 KiB for writes) a 200 MB artifact took thousands of thread-pool round trips.
 */
const FILE_BUFFER_BYTES = 1024 * 1024;

/** Artifact metadata in Redis: each artifact's record, the chunks stored so far, the artifacts of each lease. */
export class ArtifactRecords {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    artifact: (id: string) => `${this.prefix}artifacts:${id}`,
    artifactChunks: (id: string) => `${this.prefix}artifacts:${id}:chunks`,
    leaseArtifacts: (leaseId: string) => `${this.prefix}artifacts-of:${leaseId}`,
  };

  /** Records that chunk `index` of an artifact is stored; returns how many distinct chunks are. */
  async chunkStored(artifactId: string, index: number): Promise<number> {
    const key = this.k.artifactChunks(artifactId);
    const [, count] =
      (await this.redis
        .multi()
        .sadd(key, index)
        .scard(key)
        .expire(key, 24 * 3600)
        .exec()) ?? [];
    return Number(count?.[1] ?? 0);
  }

  async put(artifact: Artifact): Promise<void> {
    await this.redis
      .multi()
      .set(this.k.artifact(artifact.id), JSON.stringify(artifact))
      .sadd(this.k.leaseArtifacts(artifact.leaseId), artifact.id)
      .del(this.k.artifactChunks(artifact.id))
      .exec();
  }

  async get(artifactId: string): Promise<Artifact | null> {
    const text = await this.redis.get(this.k.artifact(artifactId));
    return text === null ? null : Artifact.parse(JSON.parse(text));
  }

  /** Starts the retention clock of an ended lease's artifact records: each says when it expires, and does after `seconds`. */
  async retain(leaseId: string, seconds: number): Promise<void> {
    const multi = this.redis.multi();
    const expiresAt = new Date(Date.now() + seconds * 1000).toISOString();
    for (const id of await this.redis.smembers(this.k.leaseArtifacts(leaseId))) {
      const artifact = await this.get(id);
      if (artifact) multi.set(this.k.artifact(id), JSON.stringify({ ...artifact, expiresAt }), 'EX', seconds);
    }
    multi.expire(this.k.leaseArtifacts(leaseId), seconds);
    await multi.exec();
  }
}

export class ArtifactStore {
  constructor(
    private readonly dir: string,
    private readonly records: Pick<ArtifactRecords, 'chunkStored' | 'put' | 'get'>,
  ) {}

  /** The part file of an artifact made of chunks (older agents): one per artifact, chunks written in place. */
  private partPath(id: string): string {
    return join(this.dir, `${id}.part`);
  }

  /** A part file of one receive of `id`'s stream: its own, so two receives of one artifact never write into each other. */
  private receivePath(id: string): string {
    return join(this.dir, `${id}.${randomBytes(6).toString('hex')}.part`);
  }

  private finalPath(id: string): string {
    return join(this.dir, id);
  }

  /** Stores chunk `index` after checking its sha256 (hex). Idempotent. */
  async writeChunk(id: string, index: number, data: Buffer, sha256: string): Promise<void> {
    if (createHash('sha256').update(data).digest('hex') !== sha256) {
      throw new AppError('artifact.corrupt', `chunk ${index} of ${id} does not match its sha256`, { details: { artifactId: id, index } });
    }
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    // O_RDWR|O_CREAT, not append mode: positional writes are ignored on files opened O_APPEND (pwrite(2)).
    const handle = await open(this.partPath(id), constants.O_RDWR | constants.O_CREAT, 0o600);
    try {
      await handle.write(data, 0, data.length, index * ARTIFACT_CHUNK_BYTES);
    } finally {
      await handle.close();
    }
    await this.records.chunkStored(id, index);
  }

  /** The record of artifact `id`, or null when it is not stored (yet). */
  recorded(id: string): Promise<Artifact | null> {
    return this.records.get(id);
  }

  /**
   * Stores artifact `meta` from `source` (its bytes, in order), checking size and sha256 as they
   * arrive, then records it; returns the record. The caller asks `recorded` first: what is
   * stored is not received again. Throws AppError `artifact.corrupt` (discarded), or what
   * `source` fails with.
   */
  async receive(meta: Omit<Artifact, 'createdAt' | 'expiresAt'>, source: Readable): Promise<Artifact> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const hash = createHash('sha256');
    let size = 0;
    const counted = new Transform({
      highWaterMark: FILE_BUFFER_BYTES,
      transform(chunk: Buffer, _enc, callback) {
        hash.update(chunk);
        size += chunk.length;
        callback(null, chunk);
      },
    });
    const part = this.receivePath(meta.id);
    try {
      await pipeline(source, counted, createWriteStream(part, { mode: 0o600, highWaterMark: FILE_BUFFER_BYTES }));
    } catch (err) {
      await rm(part, { force: true });
      throw err;
    }
    return this.commit(meta, part, size, hash.digest('hex'));
  }

  /** Completes the artifact once every chunk is in and the whole matches; returns its record. */
  async complete(meta: Omit<Artifact, 'createdAt' | 'expiresAt'> & { chunks: number }): Promise<Artifact> {
    const existing = await this.records.get(meta.id);
    if (existing) return existing;
    if (meta.size === 0) {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await (await open(this.partPath(meta.id), 'a')).close();
    } else {
      const stored = await this.records.chunkStored(meta.id, 0);
      if (stored < meta.chunks)
        throw new AppError('artifact.incomplete', `${meta.id}: ${stored} of ${meta.chunks} chunks stored`, {
          details: { artifactId: meta.id },
        });
    }
    const { chunks: _chunks, ...rest } = meta;
    const part = this.partPath(meta.id);
    return this.commit(rest, part, (await stat(part)).size, await sha256File(part));
  }

  /**
   * Moves `part` (`size` bytes with sha256 `digest`) into place as artifact `meta` and records
   * it, when it is what `meta` announced; else removes it and throws AppError `artifact.corrupt`.
   * The rename is atomic: of two whole copies, either one is the artifact.
   */
  private async commit(meta: Omit<Artifact, 'createdAt' | 'expiresAt'>, part: string, size: number, digest: string): Promise<Artifact> {
    if (size !== meta.size || digest !== meta.sha256) {
      await rm(part, { force: true });
      throw new AppError(
        'artifact.corrupt',
        `${meta.id} arrived as ${size} bytes with sha256 ${digest}; announced ${meta.size} and ${meta.sha256}`,
        { details: { artifactId: meta.id } },
      );
    }
    await rename(part, this.finalPath(meta.id));
    const artifact: Artifact = { ...meta, createdAt: new Date().toISOString(), expiresAt: null };
    await this.records.put(artifact);
    return artifact;
  }

  /**
   * The artifact's record and its bytes. Throws AppError `artifact.not_found`, also when its file
   * is gone from the store's directory (opened here, not when the answer is sent: a stream that
   * fails to open then is fastify's 500).
   */
  async open(leaseId: string, id: string): Promise<{ artifact: Artifact; stream: Readable }> {
    const artifact = await this.records.get(id);
    const notFound = (why: string): AppError =>
      new AppError('artifact.not_found', `no artifact ${id} in sandbox ${leaseId}${why}`, { details: { artifactId: id } });
    if (!artifact || artifact.leaseId !== leaseId) throw notFound('');
    const handle = await open(this.finalPath(id), 'r').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') throw notFound(': its record is kept but its file is gone from the store');
      throw err;
    });
    return { artifact, stream: handle.createReadStream({ highWaterMark: FILE_BUFFER_BYTES }) };
  }

  /** Deletes files whose record has expired (retention) and parts abandoned for `staleMs`. Returns how many. */
  async sweep(staleMs: number): Promise<number> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    let removed = 0;
    for (const name of names) {
      const path = join(this.dir, name);
      const old = Date.now() - (await stat(path).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs > staleMs;
      const gone = name.endsWith('.part') ? old : !(await this.records.get(name)) && old;
      if (gone) {
        await rm(path, { force: true });
        removed += 1;
      }
    }
    return removed;
  }
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
