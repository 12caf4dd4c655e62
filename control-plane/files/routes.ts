/**
 * File transfer: `PUT /v1/sandboxes/:id/files?path=DIR` unpacks a tar body into DIR;
 * `GET /v1/sandboxes/:id/files?path=PATH` returns PATH as a tar. Both run tar inside the
 * sandbox as the tool user (so they can do no more than its own code could) and only reach
 * the policy's volume-backed writable roots (e.g. /workspace). The bytes go through the
 * sandbox's agent on a tunnel of their own (transfers.ts), in one pass.
 *
 * An upload is checked entry by entry as it arrives (tar-guard): an entry reaches the sandbox
 * only after it passed, and the sandbox side keeps nothing unless the whole archive arrived
 * checked (its completion mark) and fits what is there (type conflicts), so a rejected archive
 * leaves the sandbox as it was (contract/transfers.ts, UPLOAD_SCRIPT).
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { SandboxPath } from '../../contract/tools.js';
import { LeaseParams } from '../leases/schema.js';
import { toolUserOf } from '../leases/store.js';
import type { Policy } from '../policies/schema.js';
import { guardStream } from './tar-guard.js';
import { tarError, uploadConflict } from '../runtime/transfer-errors.js';
import { packThroughAgent, unpackThroughAgent, type TransferTunnels } from './transfers.js';

export interface FilesRoutesOptions {
  tunnels: TransferTunnels;
  /** Largest accepted tar body, bytes. */
  maxUploadBytes: number;
}

const FilesQuery = z.object({ path: SandboxPath }).strict();

/**
 * The volume root containing `path` and the path relative to it. Paths are normalized first
 * (`..` resolved lexically), so `/workspace/../etc` is `/etc`. Throws
 * `input.path_outside_workspace` when no volume root contains it.
 */
export function locateInVolume(policy: Policy, path: string): { root: string; relative: string } {
  const normalized = posix.normalize(path).replace(/\/+$/, '') || '/';
  for (const r of policy.filesystem.writableRoots) {
    if (r.kind !== 'volume') continue;
    if (normalized === r.path || normalized.startsWith(`${r.path}/`)) return { root: r.path, relative: posix.relative(r.path, normalized) };
  }
  const roots = policy.filesystem.writableRoots.filter((r) => r.kind === 'volume').map((r) => r.path);
  throw new AppError('input.path_outside_workspace', `${path} is outside the sandbox's file roots (${roots.join(', ')})`, {
    details: { path, roots },
  });
}

export const filesRoutes: FastifyPluginAsync<FilesRoutesOptions> = async (plugin, opts) => {
  const app = plugin.withTypeProvider<ZodTypeProvider>();
  const tags = ['files'];
  // Any body that is not JSON is taken as the archive: `curl --data-binary @x.tar` works without
  // a Content-Type of its own, and a wrong archive is refused by the tar guard with a code.
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

  const uploadSchema = {
    tags,
    summary: 'Upload a tar archive into a directory',
    description:
      'The body is a tar archive (any Content-Type). Each entry is checked before it reaches the sandbox (`files.unsafe_entry`, `files.invalid_archive` naming the entry and byte offset) and unpacked by tar inside the sandbox as the tool user, all or nothing: a refused entry, a type clash with what is there (`files.type_conflict`) or any other failure leaves the sandbox as it was.',
    params: LeaseParams,
    querystring: FilesQuery,
  };
  app.put('/v1/sandboxes/:id/files', { schema: uploadSchema, config: { lease: 'active' } }, async (request) => {
    const { id } = request.params;
    const { path } = request.query;
    const lease = request.lease;
    const { root, relative } = locateInVolume(lease.policySnapshot, path);
    if (!request.body || typeof (request.body as Readable).pipe !== 'function') {
      throw new AppError('input.unsupported_media_type', 'send the archive as Content-Type: application/x-tar');
    }
    const user = toolUserOf(lease);
    const dir = posix.join(root, relative);
    const mark = `.sbx-upload-complete.${randomBytes(16).toString('base64url')}`;
    const limited = (request.body as Readable).pipe(byteLimit(opts.maxUploadBytes));
    (request.body as Readable).on('error', (err) => limited.destroy(err));
    const { archive, summary } = guardStream(limited, { uid: user.uid, gid: user.gid, uname: user.name, gname: user.name }, { mark });
    const end = await unpackThroughAgent(opts.tunnels, id, { kind: 'unpack', dir, root, relative, mark }, archive);
    if (end.exitCode !== 0) throw uploadConflict(end.stderr, dir) ?? tarError(end.stderr, dir);
    const { entries, bytes } = await summary;
    return { path: dir, entries, bytes };
  });

  const downloadSchema = { tags, summary: 'Download a path as a tar archive', params: LeaseParams, querystring: FilesQuery };
  app.get('/v1/sandboxes/:id/files', { schema: downloadSchema, config: { lease: 'active' } }, async (request, reply) => {
    const { id } = request.params;
    const { path } = request.query;
    const lease = request.lease;
    const { root, relative } = locateInVolume(lease.policySnapshot, path);
    const full = posix.join(root, relative);
    const stream = await packThroughAgent(opts.tunnels, id, { kind: 'pack', path: full, root }, (end) => tarError(end.stderr, full));
    return reply.type('application/x-tar').send(stream);
  });
};

/** Passes bytes through until `max`, then fails with `input.body_too_large`. */
function byteLimit(max: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      if (seen > max) cb(new AppError('input.body_too_large', `upload exceeds ${max} bytes`, { details: { maxBytes: max } }));
      else cb(null, chunk);
    },
  });
}
