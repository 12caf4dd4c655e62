/**
 * `sandbox.terminals`: programs on a pseudo-terminal in the sandbox (default: the login shell).
 *
 *   const term = await sbx.terminals.create({ cols: 80, rows: 24, onData: (d) => process.stdout.write(d) });
 *   await term.write('ls -la\r');
 *   await term.resize(120, 40);
 *   const end = await term.close(); // or: await term.exited (the program ended by itself)
 *
 * Output arrives over the terminal's event stream (SSE, resumed with `Last-Event-ID` after a
 * dropped connection: nothing repeated, nothing lost); input and resizes are POSTs, applied in
 * the order they were sent. Clients that want one socket use the WebSocket attach
 * (`GET /v1/sandboxes/:id/terminals/:terminalId/ws`, README).
 */
import { z } from 'zod';
import { ToolResult } from '../contract/objects.js';
import type { SbxClient } from './client.js';
import { errorOfResponse } from './errors.js';

/** A terminal as the API shows it. */
export const TerminalView = z.object({
  terminalId: z.string(),
  status: z.enum(['starting', 'running', 'exited']),
  pid: z.number().int().nullable(),
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  /** The terminal's final result once exited: status, receipt, `data.transcript` (artifact id, sha256). */
  result: ToolResult.nullable(),
});
export type TerminalView = z.infer<typeof TerminalView>;

/** Options of `sandbox.terminals.create`. */
export interface CreateTerminalOptions {
  cols: number;
  rows: number;
  /** A script for the sandbox's shell; default the login shell. */
  cmd?: string;
  cwd?: string;
  env?: Record<string, string>;
  /** Each chunk of output, as the terminal wrote it (bytes; may split a UTF-8 sequence). */
  onData?: (data: Buffer) => void;
}

/** Sends a JSON request and parses the answer (or throws SbxError from an error answer). */
async function send(client: SbxClient, method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await client.raw(method, path, {
    ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  if (!response.ok) throw await errorOfResponse(response);
  return response.status === 204 ? null : response.json();
}

/** One open terminal. */
export class Terminal {
  /** Resolves with the terminal's final view when it ended (exit, close, timeout). */
  readonly exited: Promise<TerminalView>;

  constructor(
    private readonly client: SbxClient,
    private readonly leaseId: string,
    /** The terminal's id (also its callId in the calls API). */
    readonly id: string,
    onData?: (data: Buffer) => void,
  ) {
    this.exited = (async () => {
      for await (const event of client.events(leaseId, id)) {
        if (event.type === 'output') onData?.(Buffer.from(event.dataBase64, 'base64'));
      }
      return this.get();
    })();
    // Observed by whoever awaits it; an unobserved failure must not crash the process.
    this.exited.catch(() => undefined);
  }

  private get path(): string {
    return `/v1/sandboxes/${this.leaseId}/terminals/${this.id}`;
  }

  /** Sends keystrokes or bytes. Throws SbxError `terminal.closed` once it ended. */
  async write(data: string | Uint8Array): Promise<void> {
    const body = typeof data === 'string' ? { data } : { dataBase64: Buffer.from(data).toString('base64') };
    await send(this.client, 'POST', `${this.path}/input`, body);
  }

  /** Resizes the window (1..1000 each); the program gets SIGWINCH. Throws SbxError `input.invalid`, `terminal.closed`. */
  async resize(cols: number, rows: number): Promise<void> {
    await send(this.client, 'POST', `${this.path}/resize`, { cols, rows });
  }

  /** The terminal as it is now. */
  async get(): Promise<TerminalView> {
    return TerminalView.parse(await send(this.client, 'GET', this.path));
  }

  /** Hangs up and kills the terminal's session; resolves with its final view (status `cancelled` in `result`). */
  async close(): Promise<TerminalView> {
    await send(this.client, 'DELETE', this.path);
    return this.exited;
  }
}

/** `sandbox.terminals`. */
export class SandboxTerminals {
  constructor(
    private readonly client: SbxClient,
    private readonly leaseId: () => string,
  ) {}

  /**
   * Starts a terminal and resolves once its program runs. Throws SbxError
   * `terminal.limit_reached` (the policy's `terminals.max`), `input.invalid` (a size outside
   * 1..1000), `input.cwd_not_found`, `policy.tool_denied`.
   */
  async create(options: CreateTerminalOptions): Promise<Terminal> {
    const { onData, ...body } = options;
    const view = TerminalView.parse(await send(this.client, 'POST', `/v1/sandboxes/${this.leaseId()}/terminals`, body));
    return new Terminal(this.client, this.leaseId(), view.terminalId, onData);
  }

  /** The sandbox's open terminals (starting or running); an ended one is read by its id (`attach(id).get()`). */
  async list(): Promise<TerminalView[]> {
    const body = (await send(this.client, 'GET', `/v1/sandboxes/${this.leaseId()}/terminals`)) as { terminals: unknown[] };
    return body.terminals.map((t) => TerminalView.parse(t));
  }

  /** Attaches to a terminal started before (by id); `onData` gets its whole backlog, then what follows. */
  attach(terminalId: string, onData?: (data: Buffer) => void): Terminal {
    return new Terminal(this.client, this.leaseId(), terminalId, onData);
  }
}
