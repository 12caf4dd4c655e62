/**
 * Requests that carry a large body (a tar upload), sent with `node:http` / `node:https` rather
 * than the global fetch. Node's fetch spends about 8 ms of CPU per MB of request body: measured
 * on the bench machine, a 100 MB PUT cost 820–1020 ms of client CPU through fetch and 55–90 ms
 * through `http.request`; and a streamed fetch body is kept in memory whole until the request
 * ends (nodejs/undici#4058). The answer comes back as a fetch `Response` (its body read whole:
 * the API answers an upload with a small JSON object), so the client reads it as any other.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';

/** The body itself failed (a local file that could not be read): not a failure to reach the API. */
export class RequestBodyError extends Error {
  constructor(cause: unknown) {
    super(`the request body failed: ${(cause as Error).message}`, { cause });
  }
}

/**
 * Sends `method url` with `headers` and `body` (bytes, sent with their Content-Length; or a
 * stream, sent chunked) and resolves with the answer once it is read whole — also when the API
 * answers before the body was sent (an early 4xx). Rejects with the socket's error when no answer
 * came (ECONNREFUSED, ECONNRESET, ...), or with `RequestBodyError` when the stream failed.
 */
export function sendWithBody(url: string, method: string, headers: Record<string, string>, body: Uint8Array | Readable): Promise<Response> {
  const target = new URL(url);
  const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
  const sized = body instanceof Uint8Array;
  const request = send(target, { method, headers: sized ? { ...headers, 'content-length': String(body.byteLength) } : headers });
  return new Promise<Response>((resolve, reject) => {
    let answered = false;
    request.on('response', (response) => {
      answered = true;
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () => {
        const status = response.statusCode ?? 502;
        const text = status === 204 || status === 304 ? null : Buffer.concat(chunks);
        resolve(new Response(text, { status, headers: headersOf(response.headers) }));
      });
      // The answer came first: what is left of the body is not needed.
      if (!sized && !body.readableEnded) body.destroy();
    });
    request.on('error', (err) => {
      if (!answered) reject(err);
    });
    if (sized) {
      request.end(body);
      return;
    }
    body.on('error', (err) => {
      if (answered) return;
      answered = true;
      request.destroy();
      reject(new RequestBodyError(err));
    });
    body.pipe(request);
  });
}

/** A `Headers` of Node's parsed response headers (repeated ones joined as fetch joins them). */
function headersOf(raw: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}
