/**
 * HTTP/1.1 over a raw TCP socket, for tests of what the server does with requests no HTTP
 * client would send: a body cut short by the client's end of stream, a reset mid-body, a
 * malformed request line, oversized headers.
 */
import { connect } from 'node:net';

/** A response as read off the socket: status, lower-cased headers, body text. */
export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Writes `request` to 127.0.0.1:`port`, then ends the connection as `close` says: `keep` leaves
 * it open (the request says `connection: close`, so the server closes after its answer), `half`
 * sends FIN (the server sees the end of the stream mid-request, and can still answer), `reset`
 * sends RST (the server can answer nobody). Resolves with the response read until the
 * server closes (null when it sent none) or rejects after `timeoutMs`.
 */
export function rawExchange(port: number, request: string | Buffer, close: 'half' | 'reset' | 'keep' = 'keep', timeoutMs = 10_000): Promise<RawResponse | null> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms; read so far: ${Buffer.concat(chunks).toString('latin1').slice(0, 300)}`));
    }, timeoutMs);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(chunks)));
    });
    socket.write(request, () => {
      if (close === 'half') socket.end();
      if (close === 'reset') socket.resetAndDestroy();
    });
  });
}

function parseResponse(bytes: Buffer): RawResponse | null {
  const text = bytes.toString('utf8');
  const split = text.indexOf('\r\n\r\n');
  if (split < 0) return null;
  const [statusLine = '', ...lines] = text.slice(0, split).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: text.slice(split + 4) };
}

/** `METHOD path HTTP/1.1` with the given headers (Host and `connection: close` added) and body. */
export function rawRequest(method: string, path: string, headers: Record<string, string | number>, body: string | Buffer = ''): Buffer {
  const lines = [`${method} ${path} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), Buffer.isBuffer(body) ? body : Buffer.from(body)]);
}
