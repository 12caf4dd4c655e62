/**
 * Port previews from the SDK: `sandbox.ports.url(8000)` (a signed URL for a browser),
 * `sandbox.ports.fetch(8000, '/api')` (a request to the server in the sandbox, with the API key)
 * and `sandbox.ports.log()` (the preview log). Built on `SbxClient.raw`.
 */
import { z } from 'zod';
import { errorInfo } from '../contract/errors.js';
import { previewPathProblem } from '../contract/preview-paths.js';
import { PreviewEvent, PreviewUrl } from '../contract/previews.js';
import type { SbxClient } from './client.js';
import { SbxError, errorOfResponse } from './errors.js';

const PreviewLogAnswer = z.object({ events: z.array(PreviewEvent), dropped: z.number().int() });

/** The ports of one sandbox, as previews. */
export class SandboxPorts {
  constructor(private readonly sandbox: { readonly client: SbxClient; readonly id: string }) {}

  /**
   * A signed URL of `port` that a browser opens without an API key, valid `expiresInSeconds`
   * (default 3600, at most 7 days, never past the sandbox's `expiresAt`). Throws SbxError
   * `preview.port_denied` (the policy's `ports.allowed`), `lease.not_found`, `input.invalid`.
   */
  async url(port: number, options: { expiresInSeconds?: number } = {}): Promise<PreviewUrl> {
    const response = await this.sandbox.client.raw('POST', `${this.prefix(port)}/url`, {
      body: JSON.stringify(options),
      headers: { 'content-type': 'application/json' },
    });
    if (!response.ok) throw await errorOfResponse(response);
    return PreviewUrl.parse(await response.json());
  }

  /**
   * A request to the server listening on `port` inside the sandbox (`path` with its query, from
   * `/`): the Response as that server answered it. What the control plane refuses instead comes
   * as an sbx error body (`{error: {code}}`: `preview.port_denied` 403, `preview.port_closed` and
   * `preview.upstream_failed` 502, `preview.agent_unreachable` 504, `preview.invalid_path` 400).
   * Throws SbxError `input.invalid` for a port outside 1–65535 and `preview.invalid_path` for a
   * path the control plane would refuse (a `.`/`..` segment however spelled, NUL, bad
   * percent-encoding) before sending anything: the URL would otherwise resolve `..` itself and
   * send the API key to another route of the API.
   */
  async fetch(
    port: number,
    path = '/',
    init: { method?: string; body?: string | Uint8Array; headers?: Record<string, string> } = {},
  ): Promise<Response> {
    if (!Number.isInteger(port) || port < 1 || port > 65_535)
      throw new SbxError(
        errorInfo('input.invalid', `port must be an integer from 1 to 65535, not ${port}`, {
          issues: [{ path: 'port', message: 'must be an integer from 1 to 65535' }],
        }),
      );
    const target = path.startsWith('/') ? path : `/${path}`;
    const problem = previewPathProblem(target.split('?')[0]!.split('/').slice(1));
    if (problem !== null)
      throw new SbxError(errorInfo('preview.invalid_path', `the preview path has ${problem}; send a normalised path`, { reason: problem }));
    return this.sandbox.client.raw(init.method ?? 'GET', `${this.prefix(port)}${target}`, init);
  }

  /** The sandbox's preview log, oldest first (`limit` newest, default 1000), and how many older events were dropped. */
  async log(options: { limit?: number } = {}): Promise<{ events: PreviewEvent[]; dropped: number }> {
    const query = options.limit === undefined ? '' : `?limit=${options.limit}`;
    const response = await this.sandbox.client.raw('GET', `/v1/sandboxes/${encodeURIComponent(this.sandbox.id)}/previews${query}`);
    if (!response.ok) throw await errorOfResponse(response);
    return PreviewLogAnswer.parse(await response.json());
  }

  private prefix(port: number): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandbox.id)}/ports/${port}`;
  }
}
