/**
 * Chaos for the interactive features (issue 13): the sandbox's agent killed with SIGKILL (from
 * the host, as `crash-recovery.test.ts` does) while a shell session's command runs and a
 * terminal is attached over WebSocket. Nothing may pass for success or stay `running`: the
 * command and the terminal end `effect_unknown`, the session `ended`, the attached client gets
 * its `exit` message and a clean close, the lease ends `lost`, later input is a documented 4xx,
 * and nothing of the lease is left on the engine.
 */
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ErrorBody } from '../contract/errors.js';
import { agentPidOf, apiAs, docker, eventually, startHarness } from './fixtures/index.js';

describe('the agent killed under a session command and an attached terminal', () => {
  it(
    'the command and the terminal end effect_unknown, the session ended, the attached client gets exit and a close, the lease lost',
    { timeout: 180_000 },
    async () => {
      const h = await startHarness();
      const api = apiAs(() => h.url);
      let socket: WebSocket | undefined;
      try {
        const lease = await h.client.createSandbox();
        const call = (method: string, path: string, body?: unknown) => api(h.apiKey, method, `/v1/sandboxes/${lease.id}${path}`, body);

        const session = await call('POST', '/sessions', {});
        expect(session.status, JSON.stringify(session.body)).toBe(201);
        const sessionId = session.body.sessionId as string;
        const terminal = await call('POST', '/terminals', { cols: 80, rows: 24 });
        expect(terminal.status, JSON.stringify(terminal.body)).toBe(201);
        const terminalId = terminal.body.terminalId as string;
        socket = new WebSocket(`${h.url.replace(/^http/, 'ws')}/v1/sandboxes/${lease.id}/terminals/${terminalId}/ws`, {
          headers: { authorization: `Bearer ${h.apiKey}` },
        });
        const seen = { output: '', exit: null as Record<string, unknown> | null, closeCode: null as number | null };
        socket.on('message', (data: Buffer, isBinary: boolean) => {
          if (isBinary) seen.output += data.toString('utf8');
          else {
            const m = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
            if (m.type === 'exit') seen.exit = m;
          }
        });
        socket.on('close', (code) => (seen.closeCode = code));
        await new Promise<void>((resolve, reject) => {
          socket!.once('open', () => resolve());
          socket!.once('error', reject);
        });
        socket.send(Buffer.from('echo attached-$((6*7))\r'), { binary: true });
        await eventually(
          () => seen.output,
          (o) => /attached-42/.test(o),
        );

        // The command after the terminal: a running exec holds every access, a terminal's start would wait behind it.
        const command = await call('POST', `/sessions/${sessionId}/exec`, { cmd: 'echo started; sleep 300' });
        expect(command.status).toBe(202);
        const commandId = command.body.callId as string;
        for await (const e of h.client.events(lease.id, commandId)) if (e.type === 'output') break;

        process.kill(await agentPidOf(lease.id), 'SIGKILL');

        const lost = await eventually(
          () => h.client.getSandbox(lease.id),
          (l) => l.status === 'lost',
          60_000,
        );
        expect(lost.endReason).toBe('container_exited');
        // The attached client is told, then the socket is closed normally.
        await eventually(
          () => seen.closeCode,
          (c) => c !== null,
          30_000,
        );
        expect(seen.exit).toMatchObject({ type: 'exit', status: 'effect_unknown' });
        expect(seen.closeCode).toBe(1000);

        const commandResult = await h.client.getCall(lease.id, commandId);
        expect(commandResult.status).toBe('finished');
        expect(commandResult.result).toMatchObject({ status: 'effect_unknown', error: { code: 'execution.sandbox_lost' } });
        const ended = await call('GET', `/sessions/${sessionId}`);
        expect(ended.body).toMatchObject({ status: 'ended' });
        const t = await call('GET', `/terminals/${terminalId}`);
        expect(t.body).toMatchObject({ status: 'exited', result: { status: 'effect_unknown' } });

        // Whatever comes after is refused in the documented shape, never a 5xx.
        for (const r of [
          await call('POST', `/sessions/${sessionId}/exec`, { cmd: 'true' }),
          await call('POST', `/terminals/${terminalId}/input`, { data: 'x' }),
          await call('POST', '/terminals', { cols: 80, rows: 24 }),
          await call('POST', '/sessions', {}),
        ]) {
          expect(r.status, JSON.stringify(r.body)).toBeGreaterThanOrEqual(400);
          expect(r.status, JSON.stringify(r.body)).toBeLessThan(500);
          expect(ErrorBody.safeParse(r.body).success, JSON.stringify(r.body)).toBe(true);
        }
        expect((await docker('ps', '-a', '--filter', `label=sbx.owner=${h.config.owner}`, '--format', '{{.Names}}')).trim()).toBe('');
      } finally {
        socket?.terminate();
        await h.close();
      }
    },
  );
});
