/**
 * Requests that move bulk bytes (a tar upload, an artifact download), sent with `node:http` /
 * `node:https` rather than the global fetch. Node's fetch spends about 8 ms of CPU per MB of
 * request body: measured on the bench machine, a 100 MB PUT cost 820–1020 ms of client CPU
 * through fetch and 55–90 ms through `http.request`; a streamed fetch body is kept in memory
 * whole until the request ends (nodejs/undici#4058); reading a 200 MB response body through
 * fetch cost about twice the CPU of `http.get`. An upload's answer comes back as a fetch
 * `Response` (its body read whole: a small JSON object), so the client reads it as any other.
 */
import { request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';

/** Statuses whose answer has no body (a fetch `Response` refuses one for them). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);
/** How long a request may go without a byte moving either way before it is given up, ms (fetch waits 300 s for headers). */
const IDLE_TIMEOUT_MS = 300_000;

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
 * Redirects are not followed (the API sends none). A server that answers early and resets the
 * connection before the answer is read gives the socket's error (fetch may read the answer).
 */
export function sendWithBody(url: string, method: string, headers: Record<string, string>, body: Uint8Array | Readable): Promise<Response> {
  const sized = body instanceof Uint8Array;
  const request = requestTo(url, method, sized ? { ...headers, 'content-length': String(body.byteLength) } : headers);
  return new Promise<Response>((resolve, reject) => {
    let answered = false;
    request.on('response', (answer) => {
      answered = true;
      // An answer that came before the whole body was sent (an early 4xx): the rest is not sent,
      // and the connection goes (kept, it would wait for the body's end and hold the process).
      answer.once('end', () => request.writableFinished || request.destroy());
      responseOf(answer).then(resolve, reject);
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

/**
 * GETs `url` with `headers` and resolves with the answer as it arrives: its status and headers,
 * its body not read yet (a Node stream; a connection lost while it is read ends it with the
 * socket's error). Rejects with the socket's error when no answer came. Redirects are not
 * followed (the API sends none).
 */
export function getStreamed(url: string, headers: Record<string, string>): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = requestTo(url, 'GET', headers);
    request.on('response', resolve);
    request.on('error', reject);
    request.end();
  });
}

/** A request to `url` over http or https by its scheme, given up after IDLE_TIMEOUT_MS without a byte moving. */
function requestTo(url: string, method: string, headers: Record<string, string>): ClientRequest {
  const target = new URL(url);
  const request = (target.protocol === 'https:' ? httpsRequest : httpRequest)(target, { method, headers });
  request.setTimeout(IDLE_TIMEOUT_MS, () => request.destroy(idleError()));
  return request;
}

/** The error of a request given up after IDLE_TIMEOUT_MS without a byte moving (its `code` is the reason `api.unreachable` names). */
function idleError(): Error {
  return Object.assign(new Error(`no byte moved for ${IDLE_TIMEOUT_MS / 1000} s`), { code: 'ETIMEDOUT' });
}

/** A fetch `Response` of an answer whose body is still to be read, read whole (small JSON: an upload's summary, an error). */
export async function responseOf(answer: IncomingMessage): Promise<Response> {
  const chunks: Buffer[] = [];
  for await (const chunk of answer) chunks.push(chunk as Buffer);
  const status = answer.statusCode ?? 502;
  return new Response(NULL_BODY_STATUSES.has(status) ? null : Buffer.concat(chunks), { status, headers: headersOf(answer.headers) });
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
