/**
 * `SbxClient`: the typed HTTP client of the sbx API, one method a route. `Sandbox` (sandbox.ts)
 * is built on it; the CLI, the MCP server, the demo and the tests use both. Every answer is
 * parsed with the contract's zod schemas; every error is thrown as `SbxError` with the
 * platform's code (`api.unreachable` when no answer came).
 */
import { stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { pipeline } from 'node:stream/promises';
import { EventSourceParserStream } from 'eventsource-parser/stream';
import * as tarFs from 'tar-fs';
import { z } from 'zod';
import { CallEvent } from '../contract/events.js';
import { ImageEvent, ImageView } from '../contract/images.js';
import { CallView, EgressEvent, Lease, LeaseEvent, ToolResult, CallStatus } from '../contract/objects.js';
import { SecretMetadata } from '../contract/secrets.js';
import { Volume, VolumeList } from '../contract/volumes.js';
import { Snapshot } from '../contract/snapshots.js';
import { SbxError, errorOfResponse } from './errors.js';
import { RequestBodyError, getStreamed, responseOf, sendWithBody } from './http-body.js';
import { fetchChanges, openWatch, type ChangesPage, type FileWatch, type WatchOptions } from './watch.js';

/** What `POST /v1/sandboxes` takes; see the README's HTTP API for each field. */
export interface CreateSandboxOptions {
  /** Image reference; default the control plane's sandbox image. */
  image?: string;
  /** A snapshot (`snap_…`) to start from: its image, policy and writable roots' content (not with `image`). */
  snapshot?: string;
  /** Policy name (its latest version) or `{name, version}`. Default `default`. */
  policy?: string | { name: string; version?: number };
  /** Lease lifetime in seconds; default and maximum come from the policy (`lease.ttl_exceeds_policy`). */
  ttlSeconds?: number;
  /** Environment every call in the sandbox gets. */
  env?: Record<string, string>;
  /** Free-form labels; `sbx.*` keys are reserved. */
  labels?: Record<string, string>;
  /** Stored secrets for the lease's calls: `env` (default: the name) and/or `file` (in /run/secrets). */
  secrets?: Array<{ name: string; env?: string; file?: string }>;
  /**
   * Persistent volumes of the tenant (`client.volumes.create`) to mount at `path`; read-write
   * unless `readOnly`. A second read-write mount of a volume that is not `shared` is
   * `volume.writer_conflict` while another live sandbox writes it.
   */
  volumes?: Array<{ name: string; path: string; readOnly?: boolean }>;
  /**
   * Writable roots of the lease's own (e.g. `[{ path: '/testbed' }]`), within the policy's
   * `filesystem.leaseWritableRoots`; each starts with the image's content there, writable by the
   * tool user. `sizeBytes` default: the policy's largest within its memory.
   */
  writableRoots?: Array<{ path: string; sizeBytes?: number }>;
  /** The same key and body return the same sandbox (per tenant); another body is `lease.idempotency_conflict`. */
  idempotencyKey?: string;
}

export interface SubmitCallOptions {
  /** Dedupe handle: resubmitting the same callId with the same args returns the same call (it runs once). */
  callId?: string;
  /** Hold the request up to this many seconds (0–300) for the result. */
  waitSeconds?: number;
}

/** `202` answer of a submit that did not finish within `wait`. */
export const PendingCall = z.object({ callId: z.string(), status: CallStatus });
export type PendingCall = z.infer<typeof PendingCall>;

/** What an upload unpacked: tar entries and their bytes. */
export const UploadSummary = z.object({ path: z.string().optional(), entries: z.number().int(), bytes: z.number().int() });
export type UploadSummary = z.infer<typeof UploadSummary>;

/** A tool as `GET /v1/tools` describes it: `inputSchema` is its arguments' JSON Schema (draft 2020-12). */
export const ToolDescription = z.object({
  name: z.string(),
  version: z.string(),
  description: z.string(),
  /** What running it may do: `process` (runs code), `fs.read`, `fs.write`. */
  effectClasses: z.array(z.string()),
  inputSchema: z.record(z.string(), z.unknown()),
});
export type ToolDescription = z.infer<typeof ToolDescription>;

const ToolList = z.object({ tools: z.array(ToolDescription) });
const LeaseList = z.object({ sandboxes: z.array(Lease) });
const LeaseEventList = z.object({ events: z.array(LeaseEvent) });
const EgressList = z.object({ events: z.array(EgressEvent) });
const SecretList = z.object({ secrets: z.array(SecretMetadata) });
const ImageList = z.object({ images: z.array(ImageView) });

/** Times the event stream of one call is reopened after it dropped before `call.finished`. */
const MAX_STREAM_RECONNECTS = 20;
/** Pause before reopening a dropped event stream, ms. */
const RECONNECT_DELAY_MS = 200;

/** Options of an image build (`POST /v1/images`). */
export interface BuildImageOptions {
  /** Path of the Dockerfile inside the context. Default `Dockerfile`. */
  dockerfile?: string;
  /** Build args (`ARG` values). */
  buildArgs?: Record<string, string>;
  /** A name of the tenant's for the image; a lease may name it by this or by its id. */
  name?: string;
}

/** Packs `dir` as a tar in sorted order with zeroed times and root owners: the same files give the same bytes. */
async function packDirectory(dir: string): Promise<Buffer> {
  const info = await stat(dir).catch(() => null);
  if (!info?.isDirectory())
    throw new SbxError({
      code: 'files.not_found',
      domain: 'files',
      retryability: 'no',
      message: `no such local directory: ${dir}`,
      details: { path: dir },
    });
  const pack = tarFs.pack(dir, {
    sort: true,
    map: (header) => ({ ...header, mtime: new Date(0), uid: 0, gid: 0, uname: 'root', gname: 'root' }),
  } as tarFs.PackOptions);
  const chunks: Buffer[] = [];
  for await (const chunk of pack as unknown as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

export interface SbxClientOptions {
  /** The fetch to use (default the global one): for proxies, custom agents or tests. */
  fetch?: typeof fetch;
}

/** Persistent volumes of the key's tenant (`/v1/volumes`). */
export interface VolumesApi {
  /**
   * Creates a volume of `sizeBytes` (16 MiB to the installation's maximum, `volume.size_out_of_range`
   * otherwise); `shared` lets several sandboxes write it at once. Throws `volume.exists`,
   * `quota.exceeded`, `policy.unenforceable` (this host cannot enforce the size).
   */
  create(options: { name: string; sizeBytes: number; shared?: boolean }): Promise<Volume>;
  /** The tenant's volumes, the bytes they take and the tenant's limit. */
  list(): Promise<VolumeList>;
  /** One volume with the live sandboxes that have it mounted. Throws `volume.not_found`. */
  get(name: string): Promise<Volume>;
  /** Deletes a volume and its content. Throws `volume.not_found`, `volume.in_use` (mounted by a live sandbox). */
  delete(name: string): Promise<void>;
}

export class SbxClient {
  private readonly fetchImpl: typeof fetch;
  /** Whether `options.fetch` was given: then every request goes through it, uploads too. */
  private readonly customFetch: boolean;
  /** Persistent volumes: `client.volumes.create({name, sizeBytes})`, `list()`, `get(name)`, `delete(name)`. */
  readonly volumes: VolumesApi = {
    create: async (options) => Volume.parse(await this.json('POST', '/v1/volumes', options)),
    list: async () => VolumeList.parse(await this.json('GET', '/v1/volumes')),
    get: async (name) => Volume.parse(await this.json('GET', `/v1/volumes/${encodeURIComponent(name)}`)),
    delete: async (name) => {
      await this.json('DELETE', `/v1/volumes/${encodeURIComponent(name)}`);
    },
  };

  /** `baseUrl`: e.g. `http://127.0.0.1:7070` (no trailing slash); `apiKey`: a bearer key. */
  constructor(
    readonly baseUrl: string,
    private readonly apiKey: string,
    options: SbxClientOptions = {},
  ) {
    this.fetchImpl = options.fetch ?? fetch;
    this.customFetch = options.fetch !== undefined;
  }

  /** Leases a sandbox; resolves when it is `ready` (or throws, e.g. `policy.not_found`, `quota.exceeded`, `lease.create_failed`). */
  async createSandbox(options: CreateSandboxOptions = {}): Promise<Lease> {
    const { idempotencyKey, ...body } = options;
    const headers: Record<string, string> = idempotencyKey ? { 'idempotency-key': idempotencyKey } : {};
    return Lease.parse(await this.json('POST', '/v1/sandboxes', body, headers));
  }

  async getSandbox(id: string): Promise<Lease> {
    return Lease.parse(await this.json('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
  }

  async listSandboxes(): Promise<Lease[]> {
    return LeaseList.parse(await this.json('GET', '/v1/sandboxes')).sandboxes;
  }

  /**
   * Releases a sandbox; running calls may go on for `graceMs` before they are cancelled
   * (default 0). Releasing a released one returns it unchanged.
   */
  async releaseSandbox(id: string, options: { graceMs?: number } = {}): Promise<Lease> {
    const query = options.graceMs !== undefined ? `?graceMs=${options.graceMs}` : '';
    return Lease.parse(await this.json('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}${query}`));
  }

  /**
   * Moves a ready sandbox's expiry to now + `ttlSeconds` (`POST /v1/sandboxes/:id/renew`); the
   * whole life stays within the policy's maxTtlSeconds (`lease.ttl_exceeds_policy`). Throws
   * `lease.expired`/`lease.released` when it already ended.
   */
  async renewSandbox(id: string, ttlSeconds: number): Promise<Lease> {
    return Lease.parse(await this.json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/renew`, { ttlSeconds }));
  }

  /**
   * Pauses a sandbox (`POST /v1/sandboxes/:id/pause`): every process frozen, calls and files
   * `409 lease.paused` until resumed; its running TTL stops and `expiresAt` becomes the end of
   * its pause budget (policy `resources.pausedTtlSeconds`). Pausing a paused one returns it
   * unchanged. Throws `policy.pause_denied`, `lease.expired`/`lease.released` (410), `lease.not_ready`.
   */
  async pauseSandbox(id: string): Promise<Lease> {
    return Lease.parse(await this.json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/pause`));
  }

  /**
   * Resumes a paused sandbox where it was (`POST /v1/sandboxes/:id/resume`): processes, open
   * files and background tasks go on; the running TTL left at the pause counts again from now.
   * Resuming a running one returns it unchanged. Throws `lease.expired`/`lease.released` (410).
   */
  async resumeSandbox(id: string): Promise<Lease> {
    return Lease.parse(await this.json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/resume`));
  }

  /**
   * Snapshots a running sandbox's filesystem (`POST /v1/sandboxes/:id/snapshots`): its changed
   * files and every writable root; it keeps running, calls in flight are not waited for
   * (`inFlightCalls`). Throws SbxError `lease.not_found` (ended or another tenant's),
   * `quota.exceeded` (snapshot bytes), `snapshot.capture_failed`.
   */
  async snapshotSandbox(id: string, options: { ttlSeconds?: number } = {}): Promise<Snapshot> {
    return Snapshot.parse(await this.json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/snapshots`, options));
  }

  /** The tenant's snapshots, oldest first. */
  async listSnapshots(): Promise<Snapshot[]> {
    return z.object({ snapshots: z.array(Snapshot) }).parse(await this.json('GET', '/v1/snapshots')).snapshots;
  }

  /** Throws SbxError `snapshot.not_found`. */
  async getSnapshot(id: string): Promise<Snapshot> {
    return Snapshot.parse(await this.json('GET', `/v1/snapshots/${encodeURIComponent(id)}`));
  }

  /** Deletes a snapshot. Throws SbxError `snapshot.not_found`, `snapshot.in_use`. */
  async deleteSnapshot(id: string): Promise<void> {
    const response = await this.raw('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
    if (!response.ok) throw await errorOfResponse(response);
  }

  /**
   * Starts `count` independent sandboxes from a snapshot, all or none
   * (`POST /v1/snapshots/:id/fork`). Throws SbxError `snapshot.not_found`, `quota.exceeded`,
   * `input.invalid` (count out of bounds).
   */
  async fork(snapshotId: string, options: { count: number; ttlSeconds?: number; labels?: Record<string, string> }): Promise<Lease[]> {
    const body = await this.json('POST', `/v1/snapshots/${encodeURIComponent(snapshotId)}/fork`, options);
    return z.object({ sandboxes: z.array(Lease) }).parse(body).sandboxes;
  }

  /** The sandbox's status transitions, oldest first. */
  async leaseEvents(id: string): Promise<LeaseEvent[]> {
    return LeaseEventList.parse(await this.json('GET', `/v1/sandboxes/${encodeURIComponent(id)}/events`)).events;
  }

  /** The sandbox's egress log (network mode `allowlist`), oldest first. */
  async egress(leaseId: string, query: { decision?: 'allowed' | 'denied'; limit?: number } = {}): Promise<EgressEvent[]> {
    const params = new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]));
    return EgressList.parse(await this.json('GET', `/v1/sandboxes/${leaseId}/egress${params.size > 0 ? `?${params}` : ''}`)).events;
  }

  /** Stores `value` as the next version of secret `name` (admin key). */
  async putSecret(name: string, value: string): Promise<SecretMetadata> {
    return SecretMetadata.parse(await this.json('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { value }));
  }

  async getSecret(name: string): Promise<SecretMetadata> {
    return SecretMetadata.parse(await this.json('GET', `/v1/secrets/${encodeURIComponent(name)}`));
  }

  async listSecrets(): Promise<SecretMetadata[]> {
    return SecretList.parse(await this.json('GET', '/v1/secrets')).secrets;
  }

  /** Deletes secret `name`; deleting an absent one succeeds too. */
  async deleteSecret(name: string): Promise<void> {
    const response = await this.raw('DELETE', `/v1/secrets/${encodeURIComponent(name)}`);
    if (!response.ok) throw await errorOfResponse(response);
  }

  /** The tools sandboxes offer, with their input JSON Schemas. */
  async listTools(): Promise<ToolDescription[]> {
    return ToolList.parse(await this.json('GET', '/v1/tools')).tools;
  }

  /** Submits a call; returns the ToolResult when it finished within `waitSeconds`, else `{callId, status}`. */
  async submitCall(
    leaseId: string,
    tool: string,
    args: Record<string, unknown>,
    options: SubmitCallOptions = {},
  ): Promise<ToolResult | PendingCall> {
    const query = options.waitSeconds !== undefined ? `?wait=${options.waitSeconds}` : '';
    const body = await this.json('POST', `/v1/sandboxes/${leaseId}/calls${query}`, {
      tool,
      args,
      ...(options.callId ? { callId: options.callId } : {}),
    });
    const result = ToolResult.safeParse(body);
    return result.success ? result.data : PendingCall.parse(body);
  }

  /**
   * `POST /v1/sandboxes/:id/calls/:callId/stdin`: bytes to a running call started with `stdin:
   * "pipe"`, and/or `eof` (closes its stdin after them). Throws SbxError `call.finished`,
   * `call.stdin_not_piped`, `call.not_found`.
   */
  async writeStdin(leaseId: string, callId: string, input: { data?: Uint8Array; eof?: boolean }): Promise<void> {
    const response = await this.raw('POST', `/v1/sandboxes/${leaseId}/calls/${callId}/stdin`, {
      body: JSON.stringify({
        ...(input.data ? { dataBase64: Buffer.from(input.data).toString('base64') } : {}),
        ...(input.eof ? { eof: true } : {}),
      }),
      headers: { 'content-type': 'application/json' },
    });
    if (!response.ok) throw await errorOfResponse(response);
  }

  /** `GET /v1/sandboxes/:id/processes`: the process table with its call (or `{callId, status}` when the agent did not answer within 30 s). */
  async listProcesses(leaseId: string): Promise<unknown> {
    return this.json('GET', `/v1/sandboxes/${leaseId}/processes`);
  }

  /**
   * `POST /v1/sandboxes/:id/processes/:pid/signal`. Throws SbxError `process.not_killable`,
   * `process.not_found`, `input.invalid` (a signal name not offered).
   */
  async signalProcess(leaseId: string, pid: number, signal?: string): Promise<unknown> {
    return this.json('POST', `/v1/sandboxes/${leaseId}/processes/${pid}/signal`, signal === undefined ? {} : { signal });
  }

  async getCall(leaseId: string, callId: string): Promise<CallView> {
    return CallView.parse(await this.json('GET', `/v1/sandboxes/${leaseId}/calls/${callId}`));
  }

  async cancelCall(leaseId: string, callId: string): Promise<CallView> {
    return CallView.parse(await this.json('POST', `/v1/sandboxes/${leaseId}/calls/${callId}/cancel`, {}));
  }

  /**
   * The call's events after `afterSeq` until `call.finished`. A stream that drops is reopened
   * with `Last-Event-ID` (the last `seq` received), so each event arrives once, in order, even
   * across reconnects. Throws `SbxError` for an error answer (e.g. `call.not_found`) and when
   * the stream kept dropping.
   */
  async *events(leaseId: string, callId: string, afterSeq = 0): AsyncGenerator<CallEvent> {
    yield* this.eventStream(
      `/v1/sandboxes/${leaseId}/calls/${callId}/events`,
      (data) => CallEvent.parse(data),
      (event) => event.type === 'call.finished',
      afterSeq,
      { what: `call ${callId}`, details: { callId } },
    );
  }

  /**
   * An SSE stream of `seq`-numbered events at `path` after `afterSeq`, until `isTerminal`. A
   * stream that drops is reopened with `Last-Event-ID`, so each event arrives once, in order.
   */
  private async *eventStream<E extends { seq: number }>(
    path: string,
    parse: (data: unknown) => E,
    isTerminal: (event: E) => boolean,
    afterSeq: number,
    subject: { what: string; details: Record<string, unknown> },
  ): AsyncGenerator<E> {
    let last = afterSeq;
    for (let attempt = 0; attempt <= MAX_STREAM_RECONNECTS; attempt += 1) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, RECONNECT_DELAY_MS));
      let response: Response;
      try {
        response = await this.fetch(`${this.baseUrl}${path}`, {
          headers: {
            authorization: `Bearer ${this.apiKey}`,
            accept: 'text/event-stream',
            ...(last > 0 ? { 'last-event-id': String(last) } : {}),
          },
        });
      } catch (err) {
        // Unreachable for a moment (a restarting control plane): try again like a dropped stream.
        if (err instanceof SbxError && err.code === 'api.unreachable' && attempt < MAX_STREAM_RECONNECTS) continue;
        throw err;
      }
      if (!response.ok || !response.body) throw await errorOfResponse(response);
      const stream = response.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
      try {
        for await (const message of stream) {
          if (!message.data) continue;
          const event = parse(JSON.parse(message.data));
          // A server resuming from Last-Event-ID sends nothing at or before it; this keeps the promise if one did.
          if (event.seq <= last) continue;
          last = event.seq;
          yield event;
          if (isTerminal(event)) return;
        }
      } catch (err) {
        // A dropped connection (reset, proxy timeout) is reopened; a malformed event is not a drop.
        if (err instanceof z.ZodError || err instanceof SyntaxError) throw err;
      }
    }
    throw new SbxError({
      code: 'api.unreachable',
      domain: 'api',
      retryability: 'reconcile_first',
      message: `the event stream of ${subject.what} kept dropping`,
      details: { ...subject.details, lastSeq: last },
    });
  }

  /**
   * Starts building an image from `context`: a local directory (packed as a tar in a fixed
   * order with zeroed times and owners, so the same files give the same content digest and the
   * same image without a rebuild) or a tar archive's bytes. Resolves with the image (`status:
   * building`, or the existing image with `created: false`); `imageEvents` follows the build.
   * Throws SbxError `files.invalid_archive`, `image.dockerfile_not_found`, `input.body_too_large`,
   * `policy.unenforceable`.
   */
  async buildImage(context: string | Uint8Array, options: BuildImageOptions = {}): Promise<{ image: ImageView; created: boolean }> {
    const body = typeof context === 'string' ? await packDirectory(context) : context;
    const query = new URLSearchParams();
    if (options.dockerfile !== undefined) query.set('dockerfile', options.dockerfile);
    if (options.buildArgs !== undefined) query.set('buildArgs', JSON.stringify(options.buildArgs));
    if (options.name !== undefined) query.set('name', options.name);
    const qs = query.size > 0 ? `?${query.toString()}` : '';
    const response = await this.fetch(`${this.baseUrl}/v1/images${qs}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/x-tar' },
      body,
    });
    if (!response.ok) throw await errorOfResponse(response);
    return { image: ImageView.parse(await response.json()), created: response.status === 202 };
  }

  /** A build's events after `afterSeq` until `succeeded` or `failed`, resumed across dropped streams. */
  async *imageEvents(id: string, afterSeq = 0): AsyncGenerator<ImageEvent> {
    yield* this.eventStream(
      `/v1/images/${encodeURIComponent(id)}/events`,
      (data) => ImageEvent.parse(data),
      (event) => event.type === 'succeeded' || event.type === 'failed',
      afterSeq,
      { what: `image ${id}`, details: { imageId: id } },
    );
  }

  async getImage(id: string): Promise<ImageView> {
    return ImageView.parse(await this.json('GET', `/v1/images/${encodeURIComponent(id)}`));
  }

  /** The caller's tenant's images. */
  async listImages(): Promise<ImageView[]> {
    return ImageList.parse(await this.json('GET', '/v1/images')).images;
  }

  /**
   * The build's egress log (build policy network `{allow}`), oldest first: every connection its
   * RUN steps asked the egress proxy for, allowed or denied. Throws SbxError `image.not_found`.
   */
  async imageEgress(id: string, query: { decision?: 'allowed' | 'denied'; limit?: number } = {}): Promise<EgressEvent[]> {
    const params = new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]));
    return EgressList.parse(await this.json('GET', `/v1/images/${encodeURIComponent(id)}/egress${params.size > 0 ? `?${params}` : ''}`))
      .events;
  }

  /** Deletes an image. Throws SbxError `image.in_use` while a sandbox runs from it, `image.not_found`. */
  async deleteImage(id: string): Promise<void> {
    const response = await this.fetch(`${this.baseUrl}/v1/images/${encodeURIComponent(id)}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${this.apiKey}` },
    });
    if (!response.ok) throw await errorOfResponse(response);
  }

  /**
   * Packs a local directory's contents, or a single file, with tar-fs and unpacks it into
   * `remoteDir` of the sandbox (a file keeps its name there). `ignore` gets paths relative to
   * the directory. Throws SbxError `files.not_found` when `localPath` does not exist, and the
   * API's codes (`files.unsafe_entry`, `files.permission_denied`, `input.path_outside_workspace`).
   */
  async upload(leaseId: string, localPath: string, remoteDir: string, ignore?: (relativePath: string) => boolean): Promise<UploadSummary> {
    const info = await stat(localPath).catch(() => null);
    if (!info)
      throw new SbxError({
        code: 'files.not_found',
        domain: 'files',
        retryability: 'no',
        message: `no such local file or directory: ${localPath}`,
        details: { path: localPath },
      });
    const pack = info.isDirectory()
      ? tarFs.pack(localPath, ignore ? { ignore: (name: string) => ignore(name.slice(localPath.length).replace(/^\/+/, '')) } : {})
      : tarFs.pack(dirname(localPath), { entries: [basename(localPath)] });
    return this.putArchive(leaseId, remoteDir, Readable.from(pack as unknown as AsyncIterable<Buffer>));
  }

  /** PUT of a tar archive's bytes into `remoteDir`. */
  async uploadTar(leaseId: string, remoteDir: string, tar: Uint8Array): Promise<UploadSummary> {
    return this.putArchive(leaseId, remoteDir, tar);
  }

  /**
   * `PUT /v1/sandboxes/:id/files` of a tar archive: through `node:http` (http-body.ts: the global
   * fetch costs ~15× the CPU on a large body), or through `options.fetch` when one was given.
   */
  private async putArchive(leaseId: string, remoteDir: string, tar: Uint8Array | Readable): Promise<UploadSummary> {
    const url = `${this.baseUrl}/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(remoteDir)}`;
    const headers = { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/x-tar' };
    let response: Response;
    if (this.customFetch) {
      const body = tar instanceof Uint8Array ? tar : (Readable.toWeb(tar) as ReadableStream);
      response = await this.fetch(url, { method: 'PUT', headers, body, duplex: 'half' } as RequestInit);
    } else {
      try {
        response = await sendWithBody(url, 'PUT', headers, tar);
      } catch (err) {
        if (err instanceof RequestBodyError) throw err.cause;
        throw unreachable(url, err);
      }
    }
    if (!response.ok) throw await errorOfResponse(response);
    return UploadSummary.parse(await response.json());
  }

  /**
   * The bytes of artifact `artifactId` of sandbox `leaseId` (a call's whole output past what its
   * result keeps: `result.truncation.stdout.fullArtifact`) as a Node stream, read as it arrives.
   * Their sha256 is the artifact's in the call's receipt (`receipt.artifacts`), and the stream's
   * `sha256` (hex, from the answer's `x-sbx-sha256`; null when it had none). Throws SbxError
   * `artifact.not_found`, `api.unreachable`. Over `node:http` (http-body.ts), or through
   * `options.fetch` when one was given.
   */
  async artifact(leaseId: string, artifactId: string): Promise<Readable & { sha256: string | null }> {
    const url = `${this.baseUrl}/v1/sandboxes/${leaseId}/artifacts/${encodeURIComponent(artifactId)}`;
    const headers = { authorization: `Bearer ${this.apiKey}` };
    if (this.customFetch) {
      const response = await this.fetch(url, { headers });
      if (!response.ok || !response.body) throw await errorOfResponse(response);
      return Object.assign(Readable.fromWeb(response.body as NodeReadableStream), { sha256: response.headers.get('x-sbx-sha256') });
    }
    const answer = await getStreamed(url, headers).catch((err: unknown) => {
      throw unreachable(url, err);
    });
    if (answer.statusCode !== 200) throw await errorOfResponse(await responseOf(answer));
    const digest = answer.headers['x-sbx-sha256'];
    return Object.assign(answer, { sha256: typeof digest === 'string' ? digest : null });
  }

  /** Fetches `remotePath` as a tar and unpacks it into local directory `dir` (which must exist). */
  async download(leaseId: string, remotePath: string, dir: string): Promise<void> {
    const response = await this.fetch(`${this.baseUrl}/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(remotePath)}`, {
      headers: { authorization: `Bearer ${this.apiKey}` },
    });
    if (!response.ok || !response.body) throw await errorOfResponse(response);
    await pipeline(Readable.fromWeb(response.body as NodeReadableStream), tarFs.extract(dir, { chown: false } as tarFs.ExtractOptions));
  }

  /** Any request, returning the raw Response (tests use it for hostile input). */
  raw(method: string, path: string, init: { body?: string | Uint8Array; headers?: Record<string, string> } = {}): Promise<Response> {
    return this.fetch(`${this.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.apiKey}`, ...init.headers },
      ...(init.body !== undefined ? { body: init.body } : {}),
    });
  }

  /** Watches `path` in the sandbox (sdk/watch.ts `openWatch`); resolves once the watch is in place. */
  watchFiles(leaseId: string, path: string, options: WatchOptions = {}): Promise<FileWatch> {
    return openWatch(this.send, leaseId, path, options);
  }

  /** File changes after `since` (sdk/watch.ts `fetchChanges`). Throws SbxError `watch.resync_required`. */
  fileChanges(leaseId: string, options: { since?: number; path?: string; recursive?: boolean; limit?: number } = {}): Promise<ChangesPage> {
    return fetchChanges(this.send, leaseId, options);
  }

  private readonly send = (path: string, init: { headers?: Record<string, string>; signal?: AbortSignal }): Promise<Response> =>
    this.fetch(`${this.baseUrl}${path}`, {
      headers: { authorization: `Bearer ${this.apiKey}`, ...init.headers },
      ...(init.signal ? { signal: init.signal } : {}),
    });

  /** fetch, with network failures as `api.unreachable` naming the URL and the system's reason (ECONNREFUSED, ...). */
  private async fetch(url: string, init: RequestInit): Promise<Response> {
    try {
      return await this.fetchImpl(url, init);
    } catch (err) {
      throw unreachable(url, err);
    }
  }

  /** One JSON request to the API; throws SbxError for an error answer. For routes without a method of their own. */
  async json(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<unknown> {
    const response = await this.fetch(`${this.baseUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.apiKey}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    if (!response.ok) throw await errorOfResponse(response);
    return response.json();
  }
}

/**
 * `api.unreachable` for a request to `url` that got no answer: `err` is fetch's (the system's
 * reason in its `cause`) or a socket's own (http-body.ts: the reason is its `code`).
 */
function unreachable(url: string, err: unknown): SbxError {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const reason = cause?.code ?? cause?.message ?? (err as { code?: string }).code ?? (err as Error).message;
  const origin = new URL(url).origin;
  return new SbxError(
    {
      code: 'api.unreachable',
      domain: 'api',
      retryability: 'reconcile_first',
      message: `cannot reach sbx at ${origin}: ${reason} (another address: --url or SBX_URL)`,
      details: { url: origin, reason },
    },
    { cause: err },
  );
}
