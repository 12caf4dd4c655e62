/**
 * A small typed client of the sbx HTTP API, used by the `sbx` CLI, the demo and the tests.
 * Errors from the API are thrown as `ApiError` carrying the stable `code`.
 */
import { stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { EventSourceParserStream } from 'eventsource-parser/stream';
import * as tarFs from 'tar-fs';
import { ErrorBody, type ErrorInfo } from '../contract/errors.js';
import { CallEvent } from '../contract/events.js';
import { CallView, EgressEvent, Lease, LeaseEvent, ToolResult } from '../contract/objects.js';
import { SecretMetadata } from '../contract/secrets.js';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly info: ErrorInfo,
  ) {
    super(`${info.code}: ${info.message}`);
    this.name = 'ApiError';
  }

  get code(): string {
    return this.info.code;
  }
}

export interface CreateSandboxOptions {
  image?: string;
  policy?: string | { name: string; version?: number };
  ttlSeconds?: number;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  /** Stored secrets for the lease's calls: `env` (default: the name) and/or `file` (in /run/secrets). */
  secrets?: Array<{ name: string; env?: string; file?: string }>;
  idempotencyKey?: string;
}

export interface SubmitCallOptions {
  callId?: string;
  /** Hold the request up to this many seconds for the result. */
  waitSeconds?: number;
}

/** `202` answer of a submit that did not finish within `wait`. */
export interface PendingCall {
  callId: string;
  status: 'queued' | 'running' | 'finished';
}

export class SbxClient {
  /** `baseUrl`: e.g. `http://127.0.0.1:7070`. */
  constructor(
    readonly baseUrl: string,
    private readonly apiKey: string,
  ) {}

  async createSandbox(options: CreateSandboxOptions = {}): Promise<Lease> {
    const { idempotencyKey, ...body } = options;
    const headers: Record<string, string> = idempotencyKey ? { 'idempotency-key': idempotencyKey } : {};
    return Lease.parse(await this.json('POST', '/v1/sandboxes', body, headers));
  }

  async getSandbox(id: string): Promise<Lease> {
    return Lease.parse(await this.json('GET', `/v1/sandboxes/${id}`));
  }

  async listSandboxes(): Promise<Lease[]> {
    const body = (await this.json('GET', '/v1/sandboxes')) as { sandboxes: unknown[] };
    return body.sandboxes.map((s) => Lease.parse(s));
  }

  /** Releases the sandbox; running calls may go on for `graceMs` before they are cancelled (default 0). */
  async releaseSandbox(id: string, options: { graceMs?: number } = {}): Promise<Lease> {
    const query = options.graceMs !== undefined ? `?graceMs=${options.graceMs}` : '';
    return Lease.parse(await this.json('DELETE', `/v1/sandboxes/${id}${query}`));
  }

  /** Moves the sandbox's expiry to now + `ttlSeconds`. */
  async renewSandbox(id: string, ttlSeconds: number): Promise<Lease> {
    return Lease.parse(await this.json('POST', `/v1/sandboxes/${id}/renew`, { ttlSeconds }));
  }

  /** The sandbox's status transitions, oldest first. */
  async leaseEvents(id: string): Promise<LeaseEvent[]> {
    return ((await this.json('GET', `/v1/sandboxes/${id}/events`)) as { events: unknown[] }).events.map((e) => LeaseEvent.parse(e));
  }

  /** The sandbox's egress log (network mode `allowlist`), oldest first. */
  async egress(leaseId: string, query: { decision?: 'allowed' | 'denied'; limit?: number } = {}): Promise<EgressEvent[]> {
    const params = new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]));
    const body = (await this.json('GET', `/v1/sandboxes/${leaseId}/egress${params.size > 0 ? `?${params}` : ''}`)) as { events: unknown[] };
    return body.events.map((e) => EgressEvent.parse(e));
  }

  /** Stores `value` as the next version of secret `name` (admin key). */
  async putSecret(name: string, value: string): Promise<SecretMetadata> {
    return SecretMetadata.parse(await this.json('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { value }));
  }

  async getSecret(name: string): Promise<SecretMetadata> {
    return SecretMetadata.parse(await this.json('GET', `/v1/secrets/${encodeURIComponent(name)}`));
  }

  async listSecrets(): Promise<SecretMetadata[]> {
    return ((await this.json('GET', '/v1/secrets')) as { secrets: unknown[] }).secrets.map((s) => SecretMetadata.parse(s));
  }

  /** Deletes secret `name`; deleting an absent one succeeds too. */
  async deleteSecret(name: string): Promise<void> {
    const response = await this.raw('DELETE', `/v1/secrets/${encodeURIComponent(name)}`);
    if (!response.ok) throw await this.errorOf(response);
  }

  /** Submits a call; returns the ToolResult when it finished within `waitSeconds`, else `{callId, status}`. */
  async submitCall(leaseId: string, tool: string, args: Record<string, unknown>, options: SubmitCallOptions = {}): Promise<ToolResult | PendingCall> {
    const query = options.waitSeconds !== undefined ? `?wait=${options.waitSeconds}` : '';
    const body = await this.json('POST', `/v1/sandboxes/${leaseId}/calls${query}`, { tool, args, ...(options.callId ? { callId: options.callId } : {}) });
    const result = ToolResult.safeParse(body);
    return result.success ? result.data : (body as PendingCall);
  }

  async getCall(leaseId: string, callId: string): Promise<CallView> {
    return CallView.parse(await this.json('GET', `/v1/sandboxes/${leaseId}/calls/${callId}`));
  }

  async cancelCall(leaseId: string, callId: string): Promise<CallView> {
    return CallView.parse(await this.json('POST', `/v1/sandboxes/${leaseId}/calls/${callId}/cancel`, {}));
  }

  /**
   * The call's events from after `afterSeq` until `call.finished`, reconnecting with
   * `Last-Event-ID` when the stream drops.
   */
  async *events(leaseId: string, callId: string, afterSeq = 0): AsyncGenerator<CallEvent> {
    let last = afterSeq;
    for (let attempt = 0; attempt < 20; attempt += 1) {
      const response = await this.fetch(`${this.baseUrl}/v1/sandboxes/${leaseId}/calls/${callId}/events`, {
        headers: { authorization: `Bearer ${this.apiKey}`, accept: 'text/event-stream', ...(last > 0 ? { 'last-event-id': String(last) } : {}) },
      });
      if (!response.ok || !response.body) throw await this.errorOf(response);
      const stream = response.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
      try {
        for await (const message of stream) {
          if (!message.data) continue;
          const event = CallEvent.parse(JSON.parse(message.data));
          last = event.seq;
          yield event;
          if (event.type === 'call.finished') return;
        }
      } catch (err) {
        if (err instanceof ApiError) throw err;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`event stream of ${callId} kept dropping`);
  }

  /**
   * Packs a local directory's contents, or a single file, with tar-fs and unpacks it into
   * `remoteDir` of the sandbox (a file keeps its name there). `ignore` gets paths relative to
   * the directory. Throws Error when `localPath` does not exist.
   */
  async upload(leaseId: string, localPath: string, remoteDir: string, ignore?: (relativePath: string) => boolean): Promise<{ entries: number; bytes: number }> {
    const info = await stat(localPath).catch(() => null);
    if (!info) throw new Error(`no such local file or directory: ${localPath}`);
    const pack = info.isDirectory()
      ? tarFs.pack(localPath, ignore ? { ignore: (name: string) => ignore(name.slice(localPath.length).replace(/^\/+/, '')) } : {})
      : tarFs.pack(dirname(localPath), { entries: [basename(localPath)] });
    const response = await this.fetch(`${this.baseUrl}/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(remoteDir)}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/x-tar' },
      body: Readable.toWeb(Readable.from(pack as unknown as AsyncIterable<Buffer>)) as ReadableStream,
      duplex: 'half',
    } as RequestInit);
    if (!response.ok) throw await this.errorOf(response);
    return (await response.json()) as { entries: number; bytes: number };
  }

  /** Raw PUT of a tar body into `remoteDir`. */
  async uploadTar(leaseId: string, remoteDir: string, tar: Uint8Array): Promise<{ entries: number; bytes: number }> {
    const response = await this.fetch(`${this.baseUrl}/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(remoteDir)}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/x-tar' },
      body: tar,
    });
    if (!response.ok) throw await this.errorOf(response);
    return (await response.json()) as { entries: number; bytes: number };
  }

  /** Fetches `remotePath` as a tar and unpacks it into local directory `dir`. */
  async download(leaseId: string, remotePath: string, dir: string): Promise<void> {
    const response = await this.fetch(`${this.baseUrl}/v1/sandboxes/${leaseId}/files?path=${encodeURIComponent(remotePath)}`, {
      headers: { authorization: `Bearer ${this.apiKey}` },
    });
    if (!response.ok || !response.body) throw await this.errorOf(response);
    await pipeline(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream), tarFs.extract(dir, { chown: false } as tarFs.ExtractOptions));
  }

  /** Any request, returning the raw Response (tests use it for hostile input). */
  raw(method: string, path: string, init: { body?: string | Uint8Array; headers?: Record<string, string> } = {}): Promise<Response> {
    return this.fetch(`${this.baseUrl}${path}`, { method, headers: { authorization: `Bearer ${this.apiKey}`, ...init.headers }, ...(init.body !== undefined ? { body: init.body } : {}) });
  }

  /** fetch, with network failures named: which URL, and the system's reason (ECONNREFUSED, ...). */
  private async fetch(url: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(url, init);
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new Error(`cannot reach sbx at ${new URL(url).origin}: ${cause?.code ?? cause?.message ?? (err as Error).message}`, { cause: err });
    }
  }

  private async json(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<unknown> {
    const response = await this.fetch(`${this.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.apiKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    if (!response.ok) throw await this.errorOf(response);
    return response.json();
  }

  private async errorOf(response: Response): Promise<ApiError> {
    const text = await response.text();
    try {
      return new ApiError(response.status, ErrorBody.parse(JSON.parse(text)).error);
    } catch {
      return new ApiError(response.status, { code: 'internal.unexpected', domain: 'internal', retryability: 'safe', message: `HTTP ${response.status}: ${text.slice(0, 200)}` });
    }
  }
}
