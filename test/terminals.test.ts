/**
 * Terminals (issue 13 part 1) and stdin to a running call (part 3), end to end against a real
 * sandbox: programs on a pseudo-terminal through the WebSocket attach and the HTTP fallback
 * (SSE output, POST input and resize), DELETE, exit codes, receipts and transcripts, the
 * policy's limit, and the bad input the issue names.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { CallEvent } from '../contract/events.js';
import type { ToolResult } from '../contract/objects.js';
import { Sandbox } from '../sdk/index.js';
import { apiAs, eventually, putPolicyVariant, runCli, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;
const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});
const api = apiAs(() => h.url);
const call = (method: string, path: string, body?: unknown) => api(h.apiKey, method, `/v1/sandboxes/${leaseId}${path}`, body);

interface TerminalView {
  terminalId: string;
  status: string;
  pid: number | null;
  exitCode: number | null;
  signal: string | null;
  result: ToolResult | null;
}

/** Terminals a test opened: closed after it, also when it failed. */
const opened: string[] = [];
afterEach(async () => {
  const closing = opened.splice(0);
  for (const id of closing) await call('DELETE', `/terminals/${id}`);
  // A DELETE is 202: the terminal's place under terminals.max is given back once it has ended. The
  // next test starts with none open (the limit test counts from zero; a loaded machine is slow to end them).
  if (closing.length > 0)
    await eventually(
      async () => ((await call('GET', '/terminals')).body as { terminals: unknown[] }).terminals.length,
      (n) => n === 0,
    );
});

async function createTerminal(body: Record<string, unknown> = {}): Promise<TerminalView> {
  const r = await call('POST', '/terminals', { cols: 80, rows: 24, ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  const view = r.body as TerminalView;
  opened.push(view.terminalId);
  return view;
}

/** A WebSocket attach that collects the terminal's output as text, and its exit message. */
async function attach(terminalId: string, offset = 0) {
  const url = `${h.url.replace(/^http/, 'ws')}/v1/sandboxes/${leaseId}/terminals/${terminalId}/ws?offset=${offset}`;
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${h.apiKey}` } });
  const state = {
    output: '',
    bytes: 0,
    exit: null as null | Record<string, unknown>,
    messages: [] as Record<string, unknown>[],
    closed: false,
  };
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      state.output += data.toString('latin1');
      state.bytes += data.length;
    } else {
      const m = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
      state.messages.push(m);
      if (m.type === 'exit') state.exit = m;
    }
  });
  socket.on('close', () => (state.closed = true));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  return {
    state,
    send: (text: string) => socket.send(Buffer.from(text, 'utf8'), { binary: true }),
    sendJson: (value: unknown) => socket.send(JSON.stringify(value)),
    sendRaw: (data: Buffer) => socket.send(data, { binary: true }),
    sendText: (text: string) => socket.send(text),
    /** Waits until the output matches `pattern`. */
    waitFor: (pattern: RegExp, timeoutMs = 20_000) =>
      eventually(
        () => state.output,
        (o) => pattern.test(o),
        timeoutMs,
      ),
    close: () => socket.close(),
  };
}

async function waitExited(terminalId: string): Promise<TerminalView> {
  return eventually(
    async () => (await call('GET', `/terminals/${terminalId}`)).body as TerminalView,
    (v) => v.status === 'exited',
  );
}

describe('terminals', () => {
  it('a shell on a terminal: tty and test -t 0 say terminal, stty size reports the size and follows a resize (WebSocket and POST)', async () => {
    const t = await createTerminal({ cols: 80, rows: 24 });
    expect(t.status).toBe('running');
    expect(t.pid).toBeGreaterThan(0);
    const ws = await attach(t.terminalId);
    ws.send('tty; test -t 0 && echo IS-A-TTY; stty size\r');
    await ws.waitFor(/IS-A-TTY\r?\n24 80/);
    expect(ws.state.output).toMatch(/\/dev\/pts\/\d+/);
    // The tool user, with its own group alone (none of the agent's root groups).
    ws.send('echo ids=$(id -u):$(id -G)\r');
    await ws.waitFor(/ids=1000:1000\r?\n/);
    ws.sendJson({ type: 'resize', cols: 100, rows: 30 });
    ws.send('stty size\r');
    await ws.waitFor(/30 100/);
    expect((await call('POST', `/terminals/${t.terminalId}/resize`, { cols: 132, rows: 43 })).status).toBe(204);
    ws.send('stty size\r');
    await ws.waitFor(/43 132/);
    ws.close();
  });

  it('a WebSocket reattached at ?offset= gets every later byte once; at 0 the whole backlog', async () => {
    const t = await createTerminal();
    const first = await attach(t.terminalId);
    first.send('echo first-$((1+1))\r');
    await first.waitFor(/first-2\r\n.*\$ $/s);
    first.close();
    const resumed = await attach(t.terminalId, first.state.bytes);
    const whole = await attach(t.terminalId, 0);
    expect((await call('POST', `/terminals/${t.terminalId}/input`, { data: 'echo second-$((2+2))\r' })).status).toBe(204);
    await resumed.waitFor(/second-4\r\n.*\$ $/s);
    await eventually(
      () => whole.state.output,
      (o) => o === first.state.output + resumed.state.output,
    );
    resumed.close();
    whole.close();
  });

  it('answers a Python input() prompt through POST input, with the output on SSE, and reports exit code 0 with receipt and transcript', async () => {
    const t = await createTerminal({ cmd: `python3 -c "x = input('name? '); print('hello ' + x)"` });
    // The HTTP fallback: output from the SSE stream, input by POST.
    const seen = { text: '' };
    const events: CallEvent[] = [];
    const reader = (async () => {
      const response = await fetch(`${h.url}/v1/sandboxes/${leaseId}/terminals/${t.terminalId}/events`, {
        headers: { authorization: `Bearer ${h.apiKey}` },
      });
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block
            .split('\n')
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).trim())
            .join('\n');
          if (!data) continue;
          const event = JSON.parse(data) as CallEvent;
          events.push(event);
          if (event.type === 'output') seen.text += Buffer.from(event.dataBase64, 'base64').toString('utf8');
        }
      }
    })();
    await eventually(
      () => seen.text,
      (s) => s.includes('name? '),
    );
    expect((await call('POST', `/terminals/${t.terminalId}/input`, { data: 'world\r' })).status).toBe(204);
    const done = await waitExited(t.terminalId);
    await reader;
    expect(seen.text).toContain('hello world');
    expect(done.exitCode).toBe(0);
    expect(done.signal).toBeNull();
    expect(done.result?.status).toBe('succeeded');
    // Gap-free seq on the stream, ending with call.finished.
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)?.type).toBe('call.finished');
    // The receipt and the transcript artifact, whose bytes hash to its sha256 and hold the whole session.
    const receipt = done.result!.receipt!;
    expect(receipt.exit?.code).toBe(0);
    const transcript = (done.result!.data as { transcript: { artifactId: string; sha256: string } }).transcript;
    const bytes = Buffer.from(
      await (
        await fetch(`${h.url}/v1/sandboxes/${leaseId}/artifacts/${transcript.artifactId}`, {
          headers: { authorization: `Bearer ${h.apiKey}` },
        })
      ).arrayBuffer(),
    );
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(transcript.sha256);
    expect(bytes.toString('utf8')).toContain('hello world');
    // The same call through the calls API; a resumed SSE stream gives exactly the events after Last-Event-ID.
    const viaCalls = await call('GET', `/calls/${t.terminalId}`);
    expect((viaCalls.body as { tool: string }).tool).toBe('terminal');
    const resumed: number[] = [];
    for await (const e of h.client.events(leaseId, t.terminalId, 2)) resumed.push(e.seq);
    expect(resumed).toEqual(events.slice(2).map((e) => e.seq));
  });

  it('Ctrl-C (\\x03) interrupts a foreground sleep and the shell survives', async () => {
    const t = await createTerminal();
    const ws = await attach(t.terminalId);
    ws.send('echo STARTED; sleep 4711\r');
    await ws.waitFor(/STARTED\r?\n/);
    await eventually(
      async () => (await exec({ cmd: 'pgrep -f "sleep 471[1]" || true' })).stdout,
      (s) => s.trim() !== '',
    );
    ws.send('\x03');
    ws.send('echo alive-$((20+22))\r');
    await ws.waitFor(/alive-42/);
    expect((await exec({ cmd: 'pgrep -f "sleep 471[1]" || echo none' })).stdout.trim()).toBe('none');
    ws.close();
  });

  it('an exit code is reported; DELETE hangs up and kills the whole tree; input afterwards is 409 terminal.closed', async () => {
    const exited = await createTerminal({ cmd: 'exit 3' });
    const e = await waitExited(exited.terminalId);
    expect(e.exitCode).toBe(3);
    expect(e.result?.error?.code).toBe('execution.nonzero_exit');

    const t = await createTerminal();
    const ws = await attach(t.terminalId);
    // A background job in its own process group, and a foreground one.
    ws.send('sleep 4242 & echo BG; sleep 4243\r');
    await ws.waitFor(/BG/);
    await eventually(
      async () => (await exec({ cmd: 'pgrep -f "sleep 424[23]" | wc -l' })).stdout.trim(),
      (n) => n === '2',
    );
    const del = await call('DELETE', `/terminals/${t.terminalId}`);
    expect([200, 202]).toContain(del.status);
    const done = await waitExited(t.terminalId);
    expect(done.result?.status).toBe('cancelled');
    expect(done.signal ?? done.exitCode).not.toBeNull();
    expect(done.result?.receipt?.exit?.killedBy).toBe('cancel');
    await eventually(
      () => ws.state.exit,
      (x) => x !== null,
    );
    expect((await exec({ cmd: 'pgrep -f "sleep 424[23]" || echo none' })).stdout.trim()).toBe('none');
    const late = await call('POST', `/terminals/${t.terminalId}/input`, { data: 'echo hi\r' });
    expect(late.status).toBe(409);
    expect((late.body as { error: { code: string } }).error.code).toBe('terminal.closed');
    expect((await call('POST', `/terminals/${t.terminalId}/resize`, { cols: 10, rows: 10 })).status).toBe(409);
  });

  it('bad input: resize to 0 or 100000 columns is 400; binary garbage crashes nothing and the shell still answers', async () => {
    const t = await createTerminal();
    for (const size of [
      { cols: 0, rows: 24 },
      { cols: 100_000, rows: 24 },
      { cols: 80, rows: -1 },
      { cols: 1.5, rows: 2 },
    ]) {
      const r = await call('POST', `/terminals/${t.terminalId}/resize`, size);
      expect(r.status).toBe(400);
      expect((r.body as { error: { code: string } }).error.code).toBe('input.invalid');
    }
    expect((await call('POST', '/terminals', { cols: 100_000, rows: 24 })).status).toBe(400);
    expect((await call('POST', `/terminals/${t.terminalId}/input`, { data: 'a', dataBase64: 'YQ==' })).status).toBe(400);
    const ws = await attach(t.terminalId);
    ws.sendJson({ type: 'resize', cols: 0, rows: 5 });
    ws.sendText('not json');
    await eventually(
      () => ws.state.messages.filter((m) => m.type === 'error').length,
      (n) => n >= 1,
    );
    ws.close();
    // Random bytes over both paths reach a raw-mode reader byte for byte, in order.
    const raw = await createTerminal({ cmd: 'stty raw -echo; echo READY; head -c 8192 > /tmp/garbage.bin; echo GOT-ALL' });
    const rawWs = await attach(raw.terminalId);
    await rawWs.waitFor(/READY/);
    const first = randomBytes(4096);
    const second = randomBytes(4096);
    expect((await call('POST', `/terminals/${raw.terminalId}/input`, { dataBase64: first.toString('base64') })).status).toBe(204);
    rawWs.sendRaw(second);
    await rawWs.waitFor(/GOT-ALL/);
    const digest = createHash('sha256')
      .update(Buffer.concat([first, second]))
      .digest('hex');
    expect((await exec({ cmd: 'sha256sum < /tmp/garbage.bin' })).stdout.split(' ')[0]).toBe(digest);
    rawWs.close();
    // The shell that got the invalid frames still answers.
    const again = await attach(t.terminalId);
    again.send('echo still-$((6*7))\r');
    await again.waitFor(/still-42/);
    again.close();
  });

  it("over the policy's terminals.max is 429 terminal.limit_reached, and nothing is started", async () => {
    const max = 8;
    for (let i = 0; i < max; i += 1) await createTerminal({ cmd: 'sleep 600' });
    const r = await call('POST', '/terminals', { cols: 80, rows: 24, cmd: 'sleep 600' });
    expect(r.status).toBe(429);
    expect((r.body as { error: { code: string } }).error.code).toBe('terminal.limit_reached');
    expect((await exec({ cmd: 'pgrep -fc "^sleep 60[0]$" || true' })).stdout.trim()).toBe(String(max));
  });

  it('a missing terminal is 404 terminal.not_found; an exec call is not a terminal', async () => {
    const r = await call('POST', '/terminals/term_nope/input', { data: 'x' });
    expect(r.status).toBe(404);
    expect((r.body as { error: { code: string } }).error.code).toBe('terminal.not_found');
  });

  it('a terminal submitted as a plain call is 400 naming its route, and is not in the tool list', async () => {
    const byHand = await call('POST', '/calls', { tool: 'terminal', args: { cols: 80, rows: 24 } });
    expect(byHand.status).toBe(400);
    expect((byHand.body as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'input.invalid',
      message: expect.stringContaining('POST /v1/sandboxes/:id/terminals'),
    });
    const tools = (await h.client.listTools()).map((t) => t.name);
    expect(tools).toContain('exec');
    expect(tools).not.toContain('terminal');
  });
});

describe('terminal limits from the policy', () => {
  it('a terminal idle for idleTimeoutSeconds is hung up (timed_out, idle); max 1 refuses a second with 429', async () => {
    await putPolicyVariant(
      h,
      'terminals-idle',
      (policy) => (policy.terminals = { max: 1, idleTimeoutSeconds: 1, maxDurationSeconds: 3600 }),
    );
    const lease = await h.client.createSandbox({ policy: 'terminals-idle' });
    try {
      const path = `/v1/sandboxes/${lease.id}/terminals`;
      const created = await api(h.apiKey, 'POST', path, { cols: 80, rows: 24, cmd: 'sleep 600' });
      expect(created.status).toBe(201);
      const second = await api(h.apiKey, 'POST', path, { cols: 80, rows: 24 });
      expect(second.status).toBe(429);
      const terminalId = (created.body as TerminalView).terminalId;
      const end = await eventually(
        async () => (await api(h.apiKey, 'GET', `${path}/${terminalId}`)).body as TerminalView,
        (v) => v.status === 'exited',
      );
      expect(end.result?.status).toBe('timed_out');
      expect(end.result?.error?.code).toBe('execution.timeout');
      expect(end.result?.error?.details).toMatchObject({ idle: true, timeoutMs: 1000 });
      expect(end.signal).toBe('SIGHUP');
      // The slot is free again.
      const third = await api(h.apiKey, 'POST', path, { cols: 80, rows: 24, cmd: 'true' });
      expect(third.status).toBe(201);
    } finally {
      await h.client.releaseSandbox(lease.id);
      await api(h.apiKey, 'DELETE', '/v1/policies/terminals-idle');
    }
  });
});

describe('terminals from the SDK and the CLI', () => {
  it('sandbox.terminals.create({cols, rows, onData}) streams output, takes input and resizes, and reports the exit code', async () => {
    const sbx = await Sandbox.connect(leaseId, { url: h.url, apiKey: h.apiKey });
    let output = '';
    const term = await sbx.terminals.create({ cols: 90, rows: 20, onData: (d) => (output += d.toString('utf8')) });
    opened.push(term.id);
    await term.write('stty size\r');
    await eventually(
      () => output,
      (o) => /20 90/.test(o),
    );
    await term.resize(101, 33);
    await term.write('stty size; exit 4\r');
    const end = await term.exited;
    expect(output).toMatch(/33 101/);
    expect(end.exitCode).toBe(4);
    expect(end.result?.receipt?.exit?.code).toBe(4);
  });

  it('sbx shell ID runs a shell on a terminal with piped stdin and exits with its exit code', async () => {
    const run = await runCli({ url: h.url, apiKey: h.apiKey }, ['shell', leaseId], 'tty; stty size\nexit 6\n');
    expect(run.code, run.stderr).toBe(6);
    expect(run.stdout).toMatch(/\/dev\/pts\/\d+/);
    expect(run.stdout).toMatch(/24 80/);
  });
});

describe('stdin to a running call', () => {
  it('writes to a call started with stdin "pipe" in order; eof closes it; after the end it is 409 call.finished', async () => {
    const submit = await call('POST', '/calls', { tool: 'exec', args: { cmd: 'cat; echo "[done]"', stdin: 'pipe' } });
    expect(submit.status).toBe(202);
    const callId = (submit.body as { callId: string }).callId;
    for (const part of ['one ', 'two ', 'three ']) expect((await call('POST', `/calls/${callId}/stdin`, { data: part })).status).toBe(204);
    expect(
      (await call('POST', `/calls/${callId}/stdin`, { dataBase64: Buffer.from([0, 1, 2, 0xff]).toString('base64'), eof: true })).status,
    ).toBe(204);
    const result = await eventually(
      async () => (await call('GET', `/calls/${callId}`)).body as { status: string; result: ToolResult | null },
      (c) => c.status === 'finished',
    );
    expect(Buffer.from(result.result!.stdout, 'utf8').subarray(0, 14).toString('latin1')).toBe('one two three ');
    expect(result.result!.stdout.endsWith('[done]\n')).toBe(true);
    expect(result.result!.status).toBe('succeeded');
    const late = await call('POST', `/calls/${callId}/stdin`, { data: 'x' });
    expect(late.status).toBe(409);
    expect((late.body as { error: { code: string } }).error.code).toBe('call.finished');
  });

  it('stdin to a call without stdin "pipe", or after eof, is 409 call.stdin_not_piped; a missing call 404', async () => {
    const plain = await call('POST', '/calls', { tool: 'exec', args: { cmd: 'sleep 30' } });
    const plainId = (plain.body as { callId: string }).callId;
    const r = await call('POST', `/calls/${plainId}/stdin`, { data: 'x' });
    expect(r.status).toBe(409);
    expect((r.body as { error: { code: string } }).error.code).toBe('call.stdin_not_piped');
    await call('POST', `/calls/${plainId}/cancel`);

    const piped = await call('POST', '/calls', {
      tool: 'exec',
      args: { cmd: 'cat >/dev/null; sleep 30', stdin: 'pipe', background: true },
    });
    const pipedId = (piped.body as { callId: string }).callId;
    expect((await call('POST', `/calls/${pipedId}/stdin`, { eof: true })).status).toBe(204);
    const again = await call('POST', `/calls/${pipedId}/stdin`, { data: 'x' });
    expect(again.status).toBe(409);
    expect((again.body as { error: { code: string } }).error.code).toBe('call.stdin_not_piped');
    await call('POST', `/calls/${pipedId}/cancel`);
    expect((await call('POST', '/calls/call_nope/stdin', { data: 'x' })).status).toBe(404);
    expect((await call('POST', `/calls/${pipedId}/stdin`, {})).status).toBe(400);
  });
});
