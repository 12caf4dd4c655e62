/**
 * Terminal keystroke echo round trip: one byte written to `cat` on a terminal until the
 * terminal's echo of it comes back. Ours: the WebSocket attach (`.../terminals/:id/ws`: frame →
 * the call's input stream → the agent's pty → output event → ledger → frame). Baseline: `docker
 * exec -it` through the engine API (dockerode exec with `Tty: true`, the hijacked attach stream)
 * in the same container as the same user. Ours and the baseline alternate; ten warm-ups of each
 * are not counted.
 */
import type { Duplex } from 'node:stream';
import WebSocket from 'ws';
import type { BenchContext } from '../context.js';
import { figure, ms, side, target, times } from '../figure.js';
import type { Figure } from '../schema.js';
import { timeMs } from '../stats.js';

/** Sends one byte on `send` and resolves when `received` saw it come back. */
function echoOnce(send: (b: Buffer) => void, waitFor: (byte: number) => Promise<void>, i: number): Promise<void> {
  const byte = 97 + (i % 26); // a..z: printable, echoed as is by a cooked terminal
  const seen = waitFor(byte);
  send(Buffer.from([byte]));
  return seen;
}

/** Resolves `waitFor(byte)` when that byte arrives on the stream of chunks fed to `feed`. */
function byteWaiter(): { feed: (chunk: Buffer) => void; waitFor: (byte: number) => Promise<void> } {
  let want: { byte: number; resolve: () => void } | null = null;
  return {
    feed: (chunk) => {
      if (want && chunk.includes(want.byte)) {
        const w = want;
        want = null;
        w.resolve();
      }
    },
    waitFor: (byte) => new Promise<void>((resolve) => (want = { byte, resolve })),
  };
}

export async function terminalEcho(ctx: BenchContext): Promise<Figure> {
  const id = await ctx.lease();
  const auth = { authorization: `Bearer ${ctx.plane.apiKey}` };
  const ours: number[] = [];
  const base: number[] = [];
  let socket: WebSocket | null = null;
  let hijacked: Duplex | null = null;
  try {
    const created = await fetch(`${ctx.plane.url}/v1/sandboxes/${id}/terminals`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: 'exec cat', cols: 80, rows: 24 }),
    });
    if (created.status !== 201) throw new Error(`terminal create: ${created.status} ${await created.text()}`);
    const { terminalId } = (await created.json()) as { terminalId: string };
    const ws = new WebSocket(`${ctx.plane.url.replace(/^http/, 'ws')}/v1/sandboxes/${id}/terminals/${terminalId}/ws`, { headers: auth });
    socket = ws;
    const ourBytes = byteWaiter();
    ws.on('message', (data: Buffer, isBinary: boolean) => isBinary && ourBytes.feed(data));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });

    const exec = await ctx.docker.getContainer(ctx.container(id)).exec({
      Cmd: ['cat'],
      User: '1000:1000',
      Tty: true,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = (await exec.start({ hijack: true, stdin: true, Tty: true })) as unknown as Duplex;
    hijacked = stream;
    const baseBytes = byteWaiter();
    stream.on('data', (d: Buffer) => baseBytes.feed(d));

    for (let i = -10; i < ctx.settings.calls; i += 1) {
      const t = await timeMs(() => echoOnce((b) => ws.send(b, { binary: true }), ourBytes.waitFor, i));
      const b = await timeMs(() => echoOnce((x) => stream.write(x), baseBytes.waitFor, i));
      // A line now and then keeps the terminals' line buffers (4 KiB) from filling.
      if (i % 64 === 63) {
        ws.send(Buffer.from('\r'), { binary: true });
        stream.write('\r');
      }
      if (i < 0) continue;
      ours.push(t);
      base.push(b);
    }
  } finally {
    socket?.close();
    hijacked?.destroy();
    await ctx.release(id);
  }
  const o = side('WebSocket attach, keystroke → echo', ours);
  return figure({
    id: 'terminal-echo',
    title: 'terminal keystroke echo round trip (cat on a pty)',
    ours: o,
    baseline: side('dockerode exec Tty (docker exec -it), hijacked stream', base),
    basis: 'p50',
    targets: (s) => [target('p50 ≤ 10 ms', o.stats.p50, '<=', 10, ms), target('p50 within 10× of baseline', s ?? NaN, '>=', 0.1, times)],
  });
}
