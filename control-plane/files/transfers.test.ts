import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { AGENT_RUNTIME_BUSYBOX } from '../../contract/agent-runtime.js';
import { AppError } from '../../contract/errors.js';
import { REALPATH_SCRIPT, TRANSFER_FRAME, type TransferEnd, type TransferOp } from '../../contract/transfers.js';
import type { Tunnel } from '../agent-link/tunnels.js';
import { realpathThroughAgent, type TransferTunnels } from './transfers.js';

const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

function frame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/** Tunnels whose every transfer is answered by `agent` on the other end of a real socket; `ops` records what was asked. */
async function tunnelsAnswering(agent: (socket: net.Socket) => void): Promise<{ tunnels: TransferTunnels; ops: TransferOp[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-realpath-'));
  dirs.push(dir);
  const server = net.createServer(agent);
  const path = join(dir, 'tunnel.sock');
  await new Promise<void>((resolve) => server.listen(path, resolve));
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const ops: TransferOp[] = [];
  const tunnels: TransferTunnels = {
    openTransfer: async (_leaseId, op) => {
      ops.push(op);
      const socket = net.connect(path);
      await new Promise((resolve) => socket.once('connect', resolve));
      return { socket } as unknown as Tunnel;
    },
  };
  return { tunnels, ops };
}

const end = (e: TransferEnd): Buffer => frame(TRANSFER_FRAME.end, Buffer.from(JSON.stringify(e)));
const failure = (e: TransferEnd): Error => new AppError('files.not_found', e.stderr);

describe('realpathThroughAgent', () => {
  it('asks the agent for op realpath and returns its answer, whatever frames it came in', async () => {
    const { tunnels, ops } = await tunnelsAnswering((s) => {
      s.write(frame(TRANSFER_FRAME.data, Buffer.from('/workspace/')));
      s.end(Buffer.concat([frame(TRANSFER_FRAME.data, Buffer.from('src/é')), end({ exitCode: 0, signal: null, stderr: '' })]));
    });
    await expect(realpathThroughAgent(tunnels, 'sbx_1', '/workspace/link', failure)).resolves.toBe('/workspace/src/é');
    expect(ops).toEqual([{ kind: 'realpath', path: '/workspace/link' }]);
  });

  it('throws what onFailure makes of a failed script', async () => {
    const { tunnels } = await tunnelsAnswering((s) => s.end(end({ exitCode: 2, signal: null, stderr: 'cannot resolve' })));
    await expect(realpathThroughAgent(tunnels, 'sbx_1', '/x', failure)).rejects.toMatchObject({ code: 'files.not_found' });
  });

  it('refuses an answer over 16 KiB, and one not whole within its time, as a broken stream', async () => {
    const big = await tunnelsAnswering((s) => s.write(frame(TRANSFER_FRAME.data, Buffer.alloc(20_000, 'a'))));
    await expect(realpathThroughAgent(big.tunnels, 'sbx_1', '/x', failure)).rejects.toMatchObject({ code: 'files.transfer_broken' });
    // A byte at a time and never an END: the idle timer alone would never fire.
    const slow = await tunnelsAnswering((s) => {
      // The reader hangs up at its deadline: a write after that is expected to fail.
      s.on('error', () => undefined);
      s.write(frame(TRANSFER_FRAME.data, Buffer.from('/')));
      const drip = setInterval(() => s.writable && s.write(Buffer.from([TRANSFER_FRAME.data, 0, 0, 0, 1, 0x61])), 20);
      s.once('close', () => clearInterval(drip));
    });
    await expect(realpathThroughAgent(slow.tunnels, 'sbx_1', '/x', failure, 300)).rejects.toMatchObject({
      code: 'files.transfer_broken',
      message: expect.stringContaining('300 ms'),
    });
  });
});

describe('REALPATH_SCRIPT', () => {
  /**
   * A busybox to run it with: the runtime's where this runs in a sandbox (the demo runs the unit
   * tests in one), else this machine's (set-up builds the runtime from it).
   */
  const busybox = [AGENT_RUNTIME_BUSYBOX, '/bin/busybox', '/usr/bin/busybox'].find((path) => existsSync(path));
  const resolve = async (path: string): Promise<string> =>
    (await promisify(execFile)(busybox!, ['sh', '-c', REALPATH_SCRIPT.replace(AGENT_RUNTIME_BUSYBOX, busybox!), 'sbx-realpath', path]))
      .stdout;

  it('finds a busybox to run the script with', () => {
    expect(busybox).toBeDefined();
  });

  it('follows symlinks on the longest existing prefix and keeps the missing rest; / is itself', async () => {
    const root = await mkdtemp(join(tmpdir(), 'sbx-realpath-tree-'));
    dirs.push(root);
    await mkdir(join(root, 'src/deep'), { recursive: true });
    await symlink(join(root, 'src'), join(root, 'link'));
    expect(await resolve(join(root, 'link/deep'))).toBe(join(root, 'src/deep'));
    expect(await resolve(join(root, 'link/not/yet'))).toBe(join(root, 'src/not/yet'));
    expect(await resolve(`${root}/link/../src`)).toBe(join(root, 'src'));
    expect(await resolve('/')).toBe('/');
  });
});
