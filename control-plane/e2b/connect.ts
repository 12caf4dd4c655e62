/**
 * The Connect protocol's server side, JSON codec only, as E2B's envd clients speak it
 * (https://connectrpc.com/docs/protocol): a unary call is a JSON body in and a JSON body out; a
 * server-streaming call sends one enveloped message (`[flags u8][length u32 BE][JSON]`) and reads
 * enveloped messages back until an end-stream envelope (flags 0x02) with `{}` or `{"error": …}`.
 * Errors are `{code, message}` with the protocol's snake_case codes; a unary error's HTTP status
 * follows the protocol's code → status table.
 */
import { AppError, ERROR_CODES } from '../../contract/errors.js';
import { edgeCodeOf } from '../http/errors.js';

/** The Connect error codes sbx answers with (the protocol's names). */
export type ConnectCode =
  | 'canceled'
  | 'invalid_argument'
  | 'deadline_exceeded'
  | 'not_found'
  | 'already_exists'
  | 'permission_denied'
  | 'resource_exhausted'
  | 'failed_precondition'
  | 'unimplemented'
  | 'internal'
  | 'unavailable'
  | 'unauthenticated';

/** HTTP status of a unary error (Connect protocol, "Error Codes"; `unimplemented` aside). */
export const CONNECT_HTTP_STATUS: Record<ConnectCode, number> = {
  canceled: 499,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  // A method sbx does not serve is bad input, like any unknown path (404); clients read the code from the body.
  unimplemented: 404,
  internal: 500,
  unavailable: 503,
  unauthenticated: 401,
};

/** A Connect error to answer with. */
export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

/** Envelope flag of the end-stream message. */
const END_STREAM = 0x02;
/** Envelope flag of a compressed message: sbx neither sends nor takes compression. */
const COMPRESSED = 0x01;

/** Largest enveloped request message sbx reads, bytes (a request is a few paths or a command). */
export const MAX_REQUEST_MESSAGE_BYTES = 1024 * 1024;

/** One enveloped JSON message. */
export function envelope(message: unknown, flags = 0): Buffer {
  const json = Buffer.from(JSON.stringify(message), 'utf8');
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** The end-stream envelope: `{}`, or the error that ended the stream. */
export function endStream(error?: ConnectError): Buffer {
  return envelope(error ? { error: { code: error.code, message: error.message } } : {}, END_STREAM);
}

/**
 * The JSON message of a streaming request's body: exactly one uncompressed envelope. Throws
 * ConnectError `invalid_argument` for anything else (short, long, compressed, trailing bytes, not
 * JSON), `resource_exhausted` over MAX_REQUEST_MESSAGE_BYTES.
 */
export function readEnvelope(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectError('invalid_argument', 'the request is not one enveloped message');
  const flags = body.readUInt8(0);
  const length = body.readUInt32BE(1);
  if (flags & COMPRESSED) throw new ConnectError('invalid_argument', 'compressed messages are not accepted');
  if (flags !== 0) throw new ConnectError('invalid_argument', `unexpected envelope flags ${flags}`);
  if (length > MAX_REQUEST_MESSAGE_BYTES)
    throw new ConnectError('resource_exhausted', `the message is over ${MAX_REQUEST_MESSAGE_BYTES} bytes`);
  if (body.length !== 5 + length) throw new ConnectError('invalid_argument', 'the envelope length does not match the body');
  return parseJson(body.subarray(5));
}

/** A unary request's JSON body; throws ConnectError `invalid_argument` when it is not JSON. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.length === 0 ? '{}' : body.toString('utf8'));
  } catch {
    throw new ConnectError('invalid_argument', 'the message is not JSON');
  }
}

/** sbx error codes whose Connect code is not the one their HTTP status suggests. */
const BY_SBX_CODE: Record<string, ConnectCode> = {
  'lease.not_found': 'not_found',
  // A sandbox that ended is gone to an E2B client; a paused or starting one does not answer.
  'lease.released': 'not_found',
  'lease.expired': 'not_found',
  'lease.not_ready': 'unavailable',
  'lease.paused': 'unavailable',
  // A command that ended is a process that no longer exists.
  'call.finished': 'not_found',
  'auth.missing_api_key': 'unauthenticated',
  'auth.invalid_api_key': 'unauthenticated',
};

/** The Connect code of an HTTP status (a refusal's, fastify's own included). */
function codeOfStatus(status: number): ConnectCode {
  if (status === 401) return 'unauthenticated';
  if (status === 403) return 'permission_denied';
  if (status === 404 || status === 410) return 'not_found';
  if (status === 409) return 'failed_precondition';
  if (status === 413 || status === 429) return 'resource_exhausted';
  if (status >= 500) return 'unavailable';
  return 'invalid_argument';
}

/** `err` as a Connect error: an AppError by its code and HTTP status, fastify's 4xx by its status, anything else `internal`. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof AppError) return new ConnectError(BY_SBX_CODE[err.code] ?? codeOfStatus(err.status), `${err.code}: ${err.message}`);
  // Framework errors (bad JSON, a body too large...) carry sbx's code in the message too.
  const edge = edgeCodeOf(err);
  if (edge) return new ConnectError(BY_SBX_CODE[edge.code] ?? codeOfStatus(ERROR_CODES[edge.code].status), `${edge.code}: ${edge.message}`);
  const status = (err as { statusCode?: unknown }).statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return new ConnectError(codeOfStatus(status), (err as Error).message);
  return new ConnectError('internal', 'internal error');
}
