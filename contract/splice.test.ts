import { once } from 'node:events';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { spliceSockets } from './splice.js';

const servers: net.Server[] = [];
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** Both ends of a fresh loopback TCP connection, half-open allowed on both. */
async function pair(): Promise<[net.Socket, net.Socket]> {
  const server = net.createServer({ allowHalfOpen: true });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[net.Socket]>;
  const client = net.connect({ port: (server.address() as net.AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
  const accepted_side = (await accepted)[0];
  // Flowing, so an end is seen without a reader.
  for (const socket of [client, accepted_side]) {
    socket.on('error', () => undefined);
    socket.resume();
    sockets.push(socket);
  }
  return [client, accepted_side];
}

describe('spliceSockets', () => {
  it("passes each side's end on after its bytes, and the answer still comes back (half-open)", async () => {
    const [agent, a] = await pair();
    const [b, peer] = await pair();
    spliceSockets(a, b);
    let atPeer = '';
    peer.on('data', (d: Buffer) => (atPeer += d.toString()));
    agent.end('request');
    await once(peer, 'end');
    expect(atPeer).toBe('request');
    let atAgent = '';
    agent.on('data', (d: Buffer) => (atAgent += d.toString()));
    peer.end('answer');
    await once(agent, 'end');
    expect(atAgent).toBe('answer');
  });

  it('a side destroyed without an error ends the other, and one closed already ends it at once', async () => {
    const [, a] = await pair();
    const [b, peer] = await pair();
    spliceSockets(a, b);
    a.destroy();
    await once(peer, 'end');
    const [, gone] = await pair();
    const [c, peer2] = await pair();
    gone.destroy();
    await once(gone, 'close');
    spliceSockets(gone, c);
    await once(peer2, 'end');
    expect(c.writableEnded).toBe(true);
  });
});
