/**
 * The first line of a connection from an agent (a tunnel's hello or answer, a node relay's link
 * header), read without a stream parser: the bytes after it stay for whoever takes the socket.
 */
import type net from 'node:net';

/**
 * Reads one line (at most `maxBytes`, else the socket is destroyed) and calls `onLine` with it
 * and the bytes after it, the socket paused.
 */
export function readLine(socket: net.Socket, maxBytes: number, onLine: (line: string, rest: Buffer) => void): void {
  let buffered: Buffer = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    const end = buffered.indexOf(0x0a);
    if (end < 0) {
      if (buffered.length >= maxBytes) socket.destroy();
      return;
    }
    socket.off('data', onData);
    socket.pause();
    onLine(buffered.subarray(0, end).toString('utf8'), buffered.subarray(end + 1));
  };
  socket.on('data', onData);
  socket.resume();
}
