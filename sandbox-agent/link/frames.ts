/**
 * The agent's side of the transfer frames (contract/transfers.ts): a type byte, a 32-bit
 * big-endian payload length, the payload.
 */
import type net from 'node:net';
import { TRANSFER_FRAME_HEADER_BYTES } from '../../contract/transfers.js';

/** Writes one frame (header and payload in one write); false: the tunnel is full, wait for 'drain'. */
export function writeFrame(tunnel: net.Socket, type: number, payload: Buffer): boolean {
  const header = Buffer.allocUnsafe(TRANSFER_FRAME_HEADER_BYTES);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 1);
  tunnel.cork();
  tunnel.write(header);
  const room = tunnel.write(payload);
  tunnel.uncork();
  return room;
}
