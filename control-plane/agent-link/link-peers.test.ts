import { once } from 'node:events';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { LinkHeader } from '../../contract/link.js';
import { LinkPeers, tunnelSocketName } from './link-peers.js';

const ME = '00000000000000aa';
const PEER = '00000000000000bb';
const servers: net.Server[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A stand-in for the peer's link listener: records what arrives and echoes what follows the header in upper case. */
async function peerListener(): Promise<{ port: number; received: Promise<string> }> {
  let resolveReceived: (line: string) => void;
  const received = new Promise<string>((r) => (resolveReceived = r));
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    let buffered = '';
    socket.on('data', (d: Buffer) => (buffered += d.toString()));
    socket.on('end', () => {
      resolveReceived(buffered);
      socket.end(buffered.slice(buffered.indexOf('\n') + 1).toUpperCase());
    });
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { port: (server.address() as net.AddressInfo).port, received };
}

/** A connected pair: `agent` (the relay's side) and `arrived` (what the link listener accepted). */
async function socketPair(): Promise<{ agent: net.Socket; arrived: net.Socket }> {
  const server = net.createServer();
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[net.Socket]>;
  const agent = net.connect({ port: (server.address() as net.AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
  const [arrived] = await accepted;
  arrived.pause();
  // As the link listener does: a reset costs the connection, not the process.
  for (const socket of [agent, arrived]) socket.on('error', () => undefined);
  return { agent, arrived };
}

function peers(addresses: Record<string, string>, consumer: string | null = PEER): LinkPeers {
  return new LinkPeers({
    processId: ME,
    consumerOf: async () => consumer,
    linkAddressOf: async (id) => addresses[id] ?? null,
    log: { warn: () => undefined },
  });
}

const tunnel = (socket: string): LinkHeader => ({ v: 1, lease: 'sbx_1', channel: 'tunnel', socket, token: 't' });

describe('LinkPeers', () => {
  it("passes a connection for another replica's tunnel socket on to that replica's address, header marked forwarded, half-open both ways", async () => {
    const peer = await peerListener();
    const { agent, arrived } = await socketPair();
    const header = tunnel(tunnelSocketName(PEER));
    expect(await peers({ [PEER]: `127.0.0.1:${peer.port}` }).forward(header, Buffer.from('early '), arrived)).toBe(true);
    agent.end('bytes');
    const [line, rest] = (await peer.received).split('\n');
    expect(JSON.parse(line!)).toEqual({ ...header, forwarded: true });
    expect(rest).toBe('early bytes');
    let answer = '';
    agent.on('data', (d: Buffer) => (answer += d.toString()));
    await once(agent, 'end');
    expect(answer).toBe('EARLY BYTES');
  });

  it("passes egress on to the replica consuming the lease's returns", async () => {
    const peer = await peerListener();
    const { agent, arrived } = await socketPair();
    const header: LinkHeader = { v: 1, lease: 'sbx_1', channel: 'egress', token: 't' };
    expect(await peers({ [PEER]: `127.0.0.1:${peer.port}` }).forward(header, Buffer.alloc(0), arrived)).toBe(true);
    agent.end();
    expect(JSON.parse((await peer.received).split('\n')[0]!)).toMatchObject({ channel: 'egress', forwarded: true });
  });

  it('passes nothing on for an agent gone while the replica serving it was looked up', async () => {
    let connections = 0;
    const server = net.createServer((s) => {
      connections += 1;
      s.destroy();
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { agent, arrived } = await socketPair();
    let answer: (id: string) => void = () => undefined;
    const slow = new LinkPeers({
      processId: ME,
      consumerOf: () => new Promise((r) => (answer = r)),
      linkAddressOf: async () => `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
      log: { warn: () => undefined },
    });
    const passing = slow.forward({ v: 1, lease: 'sbx_1', channel: 'egress', token: 't' }, Buffer.alloc(0), arrived);
    agent.resetAndDestroy();
    // events.once would reject on the reset's 'error'; the close is what counts.
    await new Promise((r) => arrived.once('close', r));
    answer(PEER);
    expect(await passing).toBe(false);
    expect(connections).toBe(0);
  });

  it('passes nothing on twice, nor to itself, a replica gone or without an address, or an unknown socket name', async () => {
    const { arrived } = await socketPair();
    const live = { [PEER]: '127.0.0.1:1', [ME]: '127.0.0.1:2' };
    expect(await peers(live).forward({ ...tunnel(tunnelSocketName(PEER)), forwarded: true }, Buffer.alloc(0), arrived)).toBe(false);
    expect(await peers(live).forward(tunnel(tunnelSocketName(ME)), Buffer.alloc(0), arrived)).toBe(false);
    expect(await peers({}).forward(tunnel(tunnelSocketName(PEER)), Buffer.alloc(0), arrived)).toBe(false);
    expect(await peers(live).forward(tunnel('not-a-process.sock'), Buffer.alloc(0), arrived)).toBe(false);
    expect(await peers(live, null).forward({ v: 1, lease: 'sbx_1', channel: 'egress', token: 't' }, Buffer.alloc(0), arrived)).toBe(false);
    expect(arrived.destroyed).toBe(false);
    arrived.destroy();
  });
});
